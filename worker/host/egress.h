/*
 * egress.h: the worker's side of the host-wide egress settings: the firewall's ports
 * and resolvers sets, and the resolv.conf every Sandbox gets.
 *
 * Hidden state: the settings parsed at net_egress_init and the path of the resolv.conf written
 * then, kept for the life of the worker process (drivers read them at every boot).
 */
#ifndef SBX_HOST_EGRESS_H
#define SBX_HOST_EGRESS_H

#include "config.h"
#include "egress_settings.h"

#include <stddef.h>

/* After net_init: parses egress_ports and dns_resolvers (the default read from
 * EGRESS_HOST_RESOLV_CONF, or from SBX_TEST_RESOLV_CONF's file in tests), fills the firewall's
 * sets, and writes <data_dir>/run/resolv.conf naming the resolvers. Says once in the log when
 * there is no resolver (DNS is then refused to every Sandbox). Idempotent. */
int net_egress_init(const struct sbx_config *cfg, char *err, size_t errlen);

/* The settings of net_egress_init (NULL before). */
const struct egress_settings *net_egress_settings(void);

/* The resolv.conf file for Sandboxes ("" before net_egress_init or when it could not be written:
 * then Sandboxes keep their image's own). */
const char *net_egress_resolv_conf(void);

/* The guest kernel's argument carrying the resolvers to sbx's guest init: "sbx.dns=a.b.c.d,..."
 * ("sbx.dns=" when none). */
void net_egress_kernel_arg(char *out, size_t outlen);

#endif
