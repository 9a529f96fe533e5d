/*
 * fuzz_dns_wire.c: libFuzzer target for the DNS wire format sbx's forwarder reads
 * (worker/host/dns_forwarder.c): queries come from Sandboxes, answers from a resolver. Whatever
 * the bytes: no read past them, a question's name is lower case, dotted, within its buffer and
 * ends inside the message; no more A records than asked for.
 */
#include "fuzz_common.h"
#include "host/dns_forwarder.h"

#include <ctype.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    unsigned char *m = malloc(size ? size : 1);
    if (!m)
        abort();
    memcpy(m, data, size);
    char name[256];
    uint16_t qtype = 0;
    int end = dns_question_name(m, size, name, sizeof name, &qtype);
    if (end >= 0) {
        FUZZ_CHECK((size_t)end <= size && end > 12);
        size_t n = strlen(name);
        FUZZ_CHECK(n > 0 && n < sizeof name && name[0] != '.' && name[n - 1] != '.');
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK(!isupper((unsigned char)name[i]));
    }
    struct in_addr addrs[4];
    uint32_t ttls[4];
    FUZZ_CHECK(dns_answer_a_records(m, size, addrs, ttls, 4) <= 4);
    free(m);
    return 0;
}
