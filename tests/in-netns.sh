#!/bin/sh
# in-netns.sh: runs a test in a network namespace of its own, with loopback up, so that the
# Sandboxes it starts program their veths and `table inet sbx` there and never on the host's
# network (CI runs as root on a real machine).
exec unshare --net -- sh -c 'ip link set lo up && exec "$@"' sh "$@"
