/*
 * fuzz_egress_policy.c: libFuzzer target for an App's `network` object (common/egress_policy.c),
 * which admins send: whatever the bytes, no crash; an accepted policy's normal form parses again
 * to the same normal form; no accepted address entry reaches into a blocked range; every accepted
 * name is lower case; a refusal names its field and says why.
 */
#include "egress_policy.h"
#include "fuzz_common.h"
#include "ipv4_ranges.h"

#include <ctype.h>

static struct egress_policy p, q;

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!v)
        return 0;
    char field[80], detail[256];
    int rc = egress_policy_parse(v, &p, field, sizeof field, detail, sizeof detail);
    json_decref(v);
    if (rc != 0) {
        FUZZ_CHECK(rc == EGRESS_POLICY_BAD_VALUE || rc == EGRESS_POLICY_BAD_TYPE ||
                   rc == EGRESS_POLICY_UNKNOWN_FIELD);
        FUZZ_CHECK(fuzz_terminated(field, sizeof field) && field[0] &&
                   fuzz_terminated(detail, sizeof detail) && detail[0]);
        return 0;
    }
    FUZZ_CHECK(p.n <= EGRESS_POLICY_MAX_ALLOW);
    FUZZ_CHECK((p.mode == EGRESS_ALLOWLIST) == (p.n > 0));
    for (size_t i = 0; i < p.n; i++) {
        const struct egress_allow *a = &p.allow[i];
        if (a->is_name) {
            for (const char *c = a->name; *c; c++)
                FUZZ_CHECK(!isupper((unsigned char)*c));
        } else {
            FUZZ_CHECK(a->len >= 0 && a->len <= 32 && !ipv4_blocked_overlap(a->net, a->len));
        }
    }
    json_t *norm = egress_policy_json(&p);
    char *text = json_dumps(norm, JSON_COMPACT);
    FUZZ_CHECK(text);
    FUZZ_CHECK(egress_policy_parse_text(text, &q, detail, sizeof detail) == 0);
    json_t *again = egress_policy_json(&q);
    FUZZ_CHECK(json_equal(norm, again));
    json_decref(again);
    json_decref(norm);
    free(text);
    return 0;
}
