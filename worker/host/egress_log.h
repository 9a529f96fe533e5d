/*
 * egress_log.h: the firewall's denials as they happen, read from the kernel's NFLOG group
 * FW_NFLOG_GROUP (nftables' `log group`, see firewall.h) with libnetfilter_log: which Sandbox
 * interface and address sent what to where, and which rule dropped it. No packet capture: the
 * kernel hands over only the packets the firewall drops, their first FW_NFLOG_SNAPLEN bytes.
 *
 * One reader per host: the kernel lets one socket bind a group, so the first worker of a host to
 * open it reads every Sandbox's denials (egress_log_open fails with EBUSY for the others). No
 * store and no event loop here: the caller polls egress_log_fd and calls egress_log_read, which
 * reports each denial through its callback.
 */
#ifndef SBX_EGRESS_LOG_H
#define SBX_EGRESS_LOG_H

#include <net/if.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

struct egress_denial {
    char ifname[IFNAMSIZ]; /* the Sandbox's host-side interface (FW_IFNAME_PREFIX...) */
    struct in_addr src;    /* the Sandbox's address (or the spoofed one) */
    struct in_addr dst;
    uint8_t proto;   /* IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP, ... */
    uint16_t dport;  /* host order; 0 without ports */
    char reason[16]; /* fw_drop_reason_names: "egress", "dns", "policy", "private", ... */
};

struct egress_log;

/* Binds FW_NFLOG_GROUP in the caller's network namespace. NULL with the reason (errno EBUSY:
 * another process of the host reads it). */
struct egress_log *egress_log_open(char *err, size_t errlen);
int egress_log_fd(const struct egress_log *l);
/* Reads what the kernel has queued, without blocking, calling cb once per denial. Returns the
 * number of denials, or -1 with the reason. A full socket buffer (a flood) loses denials, never
 * blocks the kernel: *lost (may be NULL) counts the times it overflowed. */
int egress_log_read(struct egress_log *l, void (*cb)(const struct egress_denial *d, void *arg),
                    void *arg, size_t *lost, char *err, size_t errlen);
void egress_log_close(struct egress_log *l);

/* "tcp", "udp", "icmp" or the number. */
const char *egress_proto_name(uint8_t proto, char buf[8]);

#endif
