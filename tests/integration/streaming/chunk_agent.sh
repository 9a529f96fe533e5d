# chunk_agent.sh: the streaming tests' App, run by busybox sh in the default image as
# ["/bin/sh", "-c", <this file's text>]. For each message line {"id":"msg_...","seq":N,"body":B}
# it prints three chunks a second apart and then its reply; for a body {"many":N} it prints N
# small chunks at once and then a reply that says how many it printed.
while IFS= read -r line; do
  id=${line#*\"id\":\"}; id=${id%%\"*}
  case "$line" in
  *'"many":'*)
    n=${line#*\"many\":}; n=${n%%\}*}; i=0
    while [ $i -lt $n ]; do echo "{\"id\":\"$id\",\"chunk\":$i}"; i=$((i+1)); done
    echo "{\"id\":\"$id\",\"reply\":{\"printed\":$n}}" ;;
  *)
    printf '%s\n' "{\"id\":\"$id\",\"chunk\":{\"n\":0,\"text\":\"caf\\u00e9 \\\"quoted\\\"\\nline\"}}"
    sleep 1
    echo "{\"id\":\"$id\",\"chunk\":{\"n\":1}}"
    sleep 1
    echo "{\"id\":\"$id\",\"chunk\":{\"n\":2}}"
    echo "{\"id\":\"$id\",\"reply\":{\"done\":true}}" ;;
  esac
done
