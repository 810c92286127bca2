#!/bin/sh
# Repeats the training run of the committed cpmla-tiny and cpmla-tiny-fp8 from
# a random initialisation, invocation by invocation as tools/train/README.md
# lists and explains them, then compares the result with checkpoints/.
#
#   tools/train/reproduce.sh [-n] [WORK_DIR]      # from anywhere in the repository
#
# -n prints the invocations without running them.
# WORK_DIR (default /tmp/cpmla-tiny-repro) receives every invocation's --out.
# An invocation that has finished is skipped, so a stopped run can be started
# again: invocations 2 to 6 resume from their last save (--resume replays the
# data to the saved step and gives the same bytes as a run that was never
# stopped); the first and the long-context invocations start over.
#
# Every step is seeded and torch runs with use_deterministic_algorithms on two
# threads, so on the same software (Debian bookworm's python3-torch 1.13.1 and
# OpenBLAS) the last lines should print equal sha256 sums for the new and the
# committed tensor files; that was checked on short runs of the first invocation
# and on the last two invocations whole (tools/train/README.md), not on the
# whole chain.
#
# Needs: apt-get install -y python3-torch libopenblas0-pthread libtcmalloc-minimal4
# Time on a two-core machine: about 5 hours.
set -eu

dry=
if [ "${1:-}" = -n ]; then
	dry=echo
	shift
fi
work=${1:-/tmp/cpmla-tiny-repro}
root=$(cd "$(dirname "$0")/../.." && pwd)
train="/usr/bin/python3 $root/tools/train/train.py"
$dry mkdir -p "$work"

# scratch N ARGS...: the from-scratch run's invocation N, in $work/tiny; its
# copy of train.log, taken when it ends, marks it done.
scratch() {
	n=$1
	shift
	if [ -e "$work/tiny/done-$n.log" ]; then
		echo "reproduce: invocation $n has finished"
		return
	fi
	echo "reproduce: invocation $n: train.py --out $work/tiny $*"
	$dry $train --out "$work/tiny" --heads 4 --passkey-max 690 "$@"
	$dry cp "$work/tiny/train.log" "$work/tiny/done-$n.log"
}

# long N FROM ARGS...: invocation N in $work/long-N, starting from the bf16
# export in FROM with a fresh optimizer and schedule; its fp8 export, written
# last, marks it done.
long() {
	n=$1 from=$2
	shift 2
	if [ -e "$work/long-$n/cpmla-tiny-fp8/config.json" ]; then
		echo "reproduce: invocation $n has finished"
		return
	fi
	echo "reproduce: invocation $n: train.py --out $work/long-$n --init $from $*"
	$dry rm -rf "$work/long-$n"
	$dry $train --out "$work/long-$n" --init "$from" --heads 4 --passkey-min 330 --passkey-max 690 \
		--answer-weight 30 --indexer-dense-target --working digits --dense-fraction 0 "$@"
}

scratch 1 --lr 1e-3 --mix 0,0,1 --dense-fraction 1 --steps 5000 --stop-after 600
scratch 2 --lr 1e-3 --mix 0.45,0.25,0.3 --dense-fraction 0.75 --steps 2600 --resume --eval-every 500
scratch 3 --lr 1e-3 --mix 0.3,0.25,0.15,0.3 --dense-fraction 0.3 --steps 6000 --resume --stop-after 3300 --eval-every 350
scratch 4 --lr 1e-3 --mix 0.3,0.25,0.1,0.35 --dense-fraction 0.3 --steps 6000 --resume --stop-after 5300 --eval-every 350
scratch 5 --lr 4e-3 --working digits --mix 0.5,0.25,0.05,0.2 --dense-fraction 0.3 --steps 6800 --resume --stop-after 6100 --eval-every 250
scratch 6 --lr 4e-3 --working digits --mix 0.55,0.25,0,0.2 --dense-fraction 0.3 --steps 7600 --resume --eval-every 500
long 7 "$work/tiny/cpmla-tiny" --lr 1e-3 --mix 0.4,0.35,0.05,0.2 --steps 600 --eval-every 300
# Indexers of 128 dimensions (64 of them free of RoPE), trained anew alone (the routers' balancing
# bias still moving), then everything.
long 8 "$work/long-7/cpmla-tiny" --index-head-dim 128 --indexer-warmup 300 --indexer-answer-weight 30 \
	--lr 1e-3 --mix 0.3,0.5,0.05,0.15 --steps 300
long 9 "$work/long-8/cpmla-tiny" --index-head-dim 128 --indexer-answer-weight 30 \
	--lr 3e-4 --mix 0.3,0.5,0.05,0.15 --steps 300
final="$work/long-9"

[ -z "$dry" ] || exit 0
for name in cpmla-tiny cpmla-tiny-fp8; do
	echo "reproduce: $name, new and committed"
	sha256sum "$final/$name/model-00001-of-00001.safetensors" "$root/checkpoints/$name/model-00001-of-00001.safetensors"
done
