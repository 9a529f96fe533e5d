/*
 * conntrack_origin.h: where a redirected UDP datagram was addressed before the firewall's nat
 * redirect. sbx's DNS forwarder receives a Sandbox's query on the host's port 5300
 * whatever resolver the Sandbox named; the kernel's connection tracking still holds the original
 * destination, and this asks it over ctnetlink, so a refused lookup's event can say which server
 * the Sandbox tried to reach. No state: one netlink socket per call.
 */
#ifndef SBX_CONNTRACK_ORIGIN_H
#define SBX_CONNTRACK_ORIGIN_H

#include <netinet/in.h>
#include <stdint.h>

/* The original destination address of the UDP flow whose reply goes from local:local_port to
 * peer:peer_port (ports in host order), i.e. the flow a redirected datagram from peer belongs to.
 * 0 and *orig_dst set, or -1 with errno (ENOENT: no such flow; ctnetlink unavailable). */
int conntrack_udp_original_dst(struct in_addr local, uint16_t local_port, struct in_addr peer,
                               uint16_t peer_port, struct in_addr *orig_dst);

#endif
