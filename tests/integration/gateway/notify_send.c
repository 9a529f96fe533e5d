/*
 * notify_send.c: test helper: sends one wake-up to every listener of a role, the way a worker
 * tells gateways "msg <messageId>". Usage: sbx-test-notify RUN_DIR ROLE MESSAGE [STORE]
 * (STORE: the `store` setting; sqlite, the default, sends datagrams into RUN_DIR).
 */
#include "notify.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s RUN_DIR ROLE MESSAGE [STORE]\n", argv[0]);
        return 2;
    }
    struct notify_peer *p = notify_peer_new(argc == 5 ? argv[4] : "sqlite", argv[1], argv[2]);
    if (!p) {
        fprintf(stderr, "%s: cannot make a sender for role %s\n", argv[0], argv[2]);
        return 1;
    }
    notify_send(p, argv[3]);
    notify_peer_free(p);
    return 0;
}
