# Sourced by the benchmarks that run on two local data nodes (NoOfReplicas=2, TCP): writes
# $out/config.ini with two free ports and two API slots, starts both ndbd from $PWD/target/release
# (built by the caller), waits until both listen, and kills them and removes $out on exit.
# Sets bin, out and pids, and prints the machine and its load.
bin=$PWD/target/release
out=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT
read -r p1 p2 < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
cat > "$out/config.ini" <<INI
[ndbd default]
NoOfReplicas=2
DataMemory=64M
[ndbd]
NodeId=1
HostName=127.0.0.1
ServerPort=$p1
DataDir=$out
[ndbd]
NodeId=2
HostName=127.0.0.1
ServerPort=$p2
DataDir=$out
[api]
HostName=127.0.0.1
[api]
HostName=127.0.0.1
INI
for id in 1 2; do
  "$bin/ndbd" --config-file "$out/config.ini" --ndb-nodeid "$id" --initial --foreground > "$out/ndbd-$id.log" 2>&1 &
  pids+=($!)
done
# Both listening (bounded: 60 s), then the API's connect waits for the cluster's start.
for port in "$p1" "$p2"; do
  for _ in $(seq 600); do
    (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
echo "Machine: $(nproc) vCPU ($cpu), Linux $(uname -r); load average $load_before before."
echo
