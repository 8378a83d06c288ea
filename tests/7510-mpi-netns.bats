#!/usr/bin/env bats
# 7510-mpi-netns.bats: data-parallel training whose gradients really cross a
# network: two network namespaces on this machine, joined by a veth pair
# (10.201.N.1 and 10.201.N.2, the interface mlt0 on both sides), one rank in
# each. mpirun runs in the first namespace; it starts the second rank's
# daemon through its rsh agent, a wrapper that runs the command under `ip
# netns exec` of the second namespace, and Open MPI talks over TCP alone
# (btl tcp,self and the out-of-band channel, both held to mlt0). The veth's
# byte counters prove the traffic: they grow by at least the bytes
# all-reduced, and by about half as much with --allreduce-dtype bf16; the
# losses and parameters are those of the same 2 ranks on one host.
#
# Needs root (CAP_SYS_ADMIN for ip netns add, CAP_NET_ADMIN for the veth),
# iproute2, mpirun and the data set; skipped with the reason otherwise. Each test creates its namespaces
# in setup and removes them in teardown, whatever happened; the last test
# checks that none is left. Every mpirun runs under timeout.
bats_require_minimum_version 1.5.0
load helpers
load mpi_helpers

ARGS="--batch 64 --momentum 0.9 --lr 0.05 --threads 1"

setup_file() {
	# one prefix per run of the file: the last test looks for leftovers
	export NS_PREFIX="mlt$$-"
}

# ns_remove: remove this test's namespaces (and the veth pair with them),
# ending first any process of ours still inside (a daemon of a failed run).
ns_remove() {
	local ns pid
	for ns in "${NS_A:-}" "${NS_B:-}"; do
		[ -n "$ns" ] && [ -e "/run/netns/$ns" ] || continue
		for pid in $(ip netns pids "$ns" 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null || true
		done
		ip netns del "$ns" 2>/dev/null || true
	done
}

setup() {
	mpi_need
	mpi_env
	command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
	NS_A=${NS_PREFIX}a$BATS_TEST_NUMBER
	NS_B=${NS_PREFIX}b$BATS_TEST_NUMBER
	NET=10.201.$BATS_TEST_NUMBER
	local err
	if ! err=$(ip netns add "$NS_A" 2>&1); then
		NS_A=
		skip "cannot create a network namespace (root, or CAP_SYS_ADMIN and CAP_NET_ADMIN, is needed): ${err//$'\n'/; }"
	fi
	ip netns add "$NS_B"
	if ! err=$(ip link add mlt0 netns "$NS_A" type veth peer name mlt0 netns "$NS_B" 2>&1); then
		ns_remove
		skip "cannot create a veth pair (CAP_NET_ADMIN is needed): ${err//$'\n'/; }"
	fi
	ip -n "$NS_A" addr add "$NET.1/24" dev mlt0
	ip -n "$NS_B" addr add "$NET.2/24" dev mlt0
	for ns in "$NS_A" "$NS_B"; do
		ip -n "$ns" link set lo up
		ip -n "$ns" link set mlt0 up
	done
	# the rsh agent: HOST COMMAND... runs COMMAND in HOST's namespace
	cat >rsh.sh <<SH
#!/bin/sh
host=\$1
shift
case \$host in
$NET.1) ns=$NS_A ;;
$NET.2) ns=$NS_B ;;
*) echo "rsh.sh: unknown host '\$host'" >&2; exit 255 ;;
esac
echo "\$host \$ns \$*" >>"$BATS_TEST_TMPDIR/rsh.log"
exec ip netns exec "\$ns" /bin/sh -c "\$*"
SH
	chmod +x rsh.sh
	printf '%s slots=1\n%s slots=1\n' "$NET.1" "$NET.2" >hosts
	# each rank notes the namespace it runs in, then becomes mltrain
	cat >rank.sh <<SH
#!/bin/sh
echo "\$OMPI_COMM_WORLD_RANK \$(ip netns identify \$\$)" >>"$BATS_TEST_TMPDIR/ranks.txt"
exec "$ML_BIN/mltrain" "\$@"
SH
	chmod +x rank.sh
}

teardown() {
	ns_remove
}

# ns_mpi ARGS...: mpirun from the first namespace, one rank a namespace, TCP
# over mlt0 only. The two "hosts" share this machine's cores, which Open MPI
# cannot know (one slot each): without mpi_yield_when_idle its busy polling
# starves the other rank (measured on 2 cores: 25-37 ms an all-reduce of
# 0.9 MB instead of 1.1).
ns_mpi() {
	timeout 120 ip netns exec "$NS_A" mpirun --allow-run-as-root --hostfile hosts \
		--mca plm_rsh_agent "$BATS_TEST_TMPDIR/rsh.sh" --mca btl tcp,self \
		--mca btl_tcp_if_include mlt0 --mca oob_tcp_if_include mlt0 \
		--mca mpi_yield_when_idle 1 "$@"
}

# veth_bytes: "TX RX" bytes of the first namespace's end of the veth pair.
veth_bytes() {
	ip netns exec "$NS_A" sh -c 'cat /sys/class/net/mlt0/statistics/tx_bytes \
		/sys/class/net/mlt0/statistics/rx_bytes' | paste -sd' '
}

# step_bytes OUTPUT: the bytes all-reduced per step that mltrain -v printed.
step_bytes() {
	[[ $1 =~ rank\ 0\ of\ 2:\ all-reduce\ .*\ of\ ([0-9]+)\ bytes/step ]] || return 1
	echo "${BASH_REMATCH[1]}"
}

@test "two ranks in two network namespaces train as on one host, the gradients crossing the veth" {
	mltrain_data
	# the same two ranks on one host, over shared memory
	OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
		run -0 timeout 120 mpirun --oversubscribe --allow-run-as-root -np 2 \
		"$ML_BIN/mltrain" "$MPI_MODEL" --data d $ARGS -o one.mlg
	one=$output
	set -- $(veth_bytes)
	tx0=$1 rx0=$2
	run -0 ns_mpi -np 2 ./rank.sh "$MPI_MODEL" --data d $ARGS -v -o two.mlg
	set -- $(veth_bytes)
	tx=$(($1 - tx0)) rx=$(($2 - rx0))
	# the loss line of one host, and the same parameters
	[ "$(grep '^epoch 1/1' <<<"$output" | sed 's/,.*//')" = "$(sed 's/,.*//' <<<"$one")" ]
	[[ $output == *"mltrain: the 2 ranks hold identical parameters"* ]]
	params_close one.mlg two.mlg
	# rank 0 ran in the first namespace, rank 1 in the second, started by the agent
	[ "$(sort ranks.txt)" = "0 $NS_A
1 $NS_B" ]
	grep -q "^$NET.2 $NS_B .*orted" rsh.log
	# 8 steps of 940,584 bytes: rank 0 sent and received at least that much on mlt0
	b=$(step_bytes "$output")
	echo "all-reduced $((8 * b)) bytes; the veth sent $tx and received $rx"
	[ "$b" -eq 940584 ]
	[ "$tx" -ge $((8 * b)) ] && [ "$rx" -ge $((8 * b)) ]
}

@test "--allreduce-dtype bf16 across the veth: half the bytes cross it, the same loss within rounding" {
	mltrain_data
	for t in f32 bf16; do
		set -- $(veth_bytes)
		tx0=$1 rx0=$2
		run -0 ns_mpi -np 2 "$ML_BIN/mltrain" "$MPI_MODEL" --data d $ARGS --epochs 2 \
			--allreduce-dtype $t -v -o $t.mlg
		set -- $(veth_bytes)
		eval "tx_$t=$(($1 - tx0)) rx_$t=$(($2 - rx0)) b_$t=$(step_bytes "$output")"
		eval "loss_$t='$(grep '^epoch 2/2' <<<"$output" | sed 's/^epoch 2\/2: loss \([0-9.]*\).*/\1/')'"
	done
	echo "f32: $b_f32 bytes/step, veth tx $tx_f32 rx $rx_f32, loss $loss_f32"
	echo "bf16: $b_bf16 bytes/step, veth tx $tx_bf16 rx $rx_bf16, loss $loss_bf16"
	[ "$b_bf16" -eq $((b_f32 / 2)) ]
	# 16 steps: each run's all-reduced bytes crossed the veth both ways
	[ "$tx_bf16" -ge $((16 * b_bf16)) ] && [ "$rx_bf16" -ge $((16 * b_bf16)) ]
	# and bf16 saved at least the bytes it did not send, each way (the rest,
	# the broadcast of the parameters and the metrics, is the same)
	[ $((tx_f32 - tx_bf16)) -ge $((16 * (b_f32 - b_bf16))) ]
	[ $((rx_f32 - rx_bf16)) -ge $((16 * (b_f32 - b_bf16))) ]
	# what rank 0 receives is nearly all gradients: it about halves
	[ $((100 * rx_bf16)) -le $((55 * rx_f32)) ]
	"$PY" -c "import sys; a, b = map(float, sys.argv[1:]); assert abs(a - b) < 0.01 * a, (a, b)" \
		"$loss_f32" "$loss_bf16"
}

@test "the namespaces of the tests above are gone" {
	run -0 ip netns list
	# the listing shows this test's own pair (the check sees namespaces) and no other of ours
	[[ $output == *"$NS_A"* && $output == *"$NS_B"* ]]
	run -1 grep -e "^$NS_PREFIX" <<<"$(ip netns list | awk '{ print $1 }' | grep -vxF -e "$NS_A" -e "$NS_B")"
}
