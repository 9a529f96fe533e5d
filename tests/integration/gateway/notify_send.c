/*
 * notify_send.c: test helper: sends one wake-up datagram to every socket of a role, the way a
 * worker tells gateways "msg <messageId>". Usage: sbx-test-notify RUN_DIR ROLE MESSAGE
 */
#include "notify.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s RUN_DIR ROLE MESSAGE\n", argv[0]);
        return 2;
    }
    struct notify_peer *p = notify_peer_new(argv[1], argv[2]);
    if (!p) {
        perror("notify_peer_new");
        return 1;
    }
    notify_send(p, argv[3]);
    notify_peer_free(p);
    return 0;
}
