#!/bin/sh
# make_test_certs.sh DIR NAME...: a throwaway CA (DIR/ca.pem, DIR/ca.key) and, for each NAME, a server
# certificate for 127.0.0.1 and localhost signed by it (DIR/NAME.pem, DIR/NAME.key), with the
# openssl command line tool: what the HTTPS tests serve and trust. The CA is made only once per
# DIR, so later calls add certificates from the same CA.
set -eu
dir=$1
shift
cd "$dir"
if [ ! -f ca.pem ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
    -out ca.pem -days 2 -subj "/CN=sbx test CA" 2>/dev/null
fi
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > server.ext
for name in "$@"; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$name.key" \
    -out "$name.csr" -subj "/CN=127.0.0.1" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
    -extfile server.ext -out "$name.pem" 2>/dev/null
  rm -f "$name.csr"
done
rm -f server.ext
