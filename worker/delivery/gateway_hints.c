/*
 * gateway_hints.c: the hints this worker sends the gateways when it committed something they
 * wait for (delivery.h): a message's long polls and streams, and the event feeds. The webhook
 * threads (webhook_sender.h) wait for the same commits, so they are woken with each hint.
 */
#include "delivery/delivery.h"
#include "delivery/webhook_sender.h"
#include "notify.h"

#include <stdio.h>

void worker_notify_gateway(struct worker *w, const char *kind, const char *id)
{
    char msg[96];
    webhook_sender_wake(w->webhooks);
    if (!w->gateway_peer)
        return;
    snprintf(msg, sizeof msg, "%s %s", kind, id);
    notify_send(w->gateway_peer, msg);
}

void worker_notify_feeds(struct worker *w)
{
    webhook_sender_wake(w->webhooks);
    if (w->gateway_peer)
        notify_send(w->gateway_peer, "events");
}
