#!/usr/bin/env bash
# The kernel switches (docs/kernels.md) as `rayless version` reports them: each instruction set's switch
# and a kernel's own, on this CPU (its features read from /proc/cpuinfo, apart from the binary's own
# CPUID test); a bad value or an unknown kernel is one error line and exit 2; and a switch reaches the
# kernel: a generation with the decode attention kernel off gives other float32 log-probs.
#   kernel_switches.sh RAYLESS
set -uo pipefail
rayless=$1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
flag() { grep -qw "$1" /proc/cpuinfo; }
# the plan's line for an entry, with the given variables set (and no other kernel switch)
line() {
  local entry=$1; shift
  env -u RAYLESS_AVX2 -u RAYLESS_AVX512 -u RAYLESS_AMX "$@" "$rayless" version | grep "^kernel $entry "
}
expect() {  # expect ENTRY EXPECTED-LINE [VAR=VALUE ...]
  local entry=$1 expected=$2; shift 2
  local got; got=$(line "$entry" "$@")
  [ "$got" = "$expected" ] || fail "$* -> '$got', expected '$expected'"
}
expect_has() {  # expect_has ENTRY TEXT [VAR=VALUE ...]
  local entry=$1 text=$2; shift 2
  local got; got=$(line "$entry" "$@")
  [[ $got == *"$text"* ]] || fail "$* -> '$got', expected it to hold '$text'"
}

# ---- AMX: generation's bfloat16 products
if flag amx_bf16 && flag amx_tile && flag avx512_bf16 && flag avx512f; then
  expect generation_linear.bfloat16 \
    "kernel generation_linear.bfloat16 amx_linear (RAYLESS_KERNEL_AMX_LINEAR=0 or RAYLESS_AMX=0: onednn_linear)"
  expect_has generation_linear.bfloat16 "kernel generation_linear.bfloat16 onednn_linear (amx_linear: RAYLESS_AMX=0;" \
    RAYLESS_AMX=0
  expect_has generation_linear.bfloat16 "(amx_linear: RAYLESS_KERNEL_AMX_LINEAR=0;" RAYLESS_KERNEL_AMX_LINEAR=0
else
  expect_has generation_linear.bfloat16 "amx_linear: no AMX tiles on this CPU"
fi

# ---- AVX2 with FMA: a decode step's kernels, and generation's float32 products
if flag avx2 && flag fma; then
  for pair in "attention.decode avx2_decode_attention LibTorch's flash kernel" \
              "rms_norm.decode avx2_decode_rms_norm LibTorch's operators" \
              "silu_times.decode avx2_decode_silu_times LibTorch's silu and mul"; do
    read -r entry kernel reference <<< "$pair"
    switch=RAYLESS_KERNEL_${kernel^^}
    expect "$entry" "kernel $entry $kernel ($switch=0 or RAYLESS_AVX2=0: $reference)"
    expect "$entry" "kernel $entry $reference ($kernel: RAYLESS_AVX2=0)" RAYLESS_AVX2=0
    expect "$entry" "kernel $entry $reference ($kernel: $switch=0)" "$switch=0"
  done
  if flag avx512f; then  # oneDNN's kernel was as fast there: the rows kernel only on request
    expect_has generation_linear.float32 \
      "kernel generation_linear.float32 onednn_linear (avx2_linear: oneDNN is as fast on a CPU with AVX-512, RAYLESS_KERNEL_AVX2_LINEAR=1 runs it;"
    expect_has generation_linear.float32 "kernel generation_linear.float32 avx2_linear (" RAYLESS_KERNEL_AVX2_LINEAR=1
  else
    expect_has generation_linear.float32 "kernel generation_linear.float32 avx2_linear ("
  fi
  expect_has generation_linear.float32 "avx2_linear: RAYLESS_AVX2=0" RAYLESS_AVX2=0 RAYLESS_KERNEL_AVX2_LINEAR=1
else
  expect_has attention.decode "avx2_decode_attention: no AVX2 with FMA on this CPU"
fi

# ---- AVX-512: the training kernels, and the optimizer's loops falling back to AVX2
if flag avx512f; then
  expect transpose "kernel transpose avx512_transpose (in transpose_tiles; RAYLESS_KERNEL_AVX512_TRANSPOSE=0 or RAYLESS_AVX512=0: transpose_tiles)"
  expect transpose "kernel transpose transpose_tiles (avx512_transpose: RAYLESS_AVX512=0; RAYLESS_KERNEL_TRANSPOSE_TILES=0: LibTorch's strided copy)" \
    RAYLESS_AVX512=0
  flag avx2 && expect adamw_update \
    "kernel adamw_update avx2_adamw (avx512_adamw: RAYLESS_AVX512=0; in adamw_single_pass; RAYLESS_KERNEL_AVX2_ADAMW=0 or RAYLESS_AVX2=0: adamw_single_pass)" \
    RAYLESS_AVX512=0
else
  expect_has transpose "avx512_transpose: no AVX-512 on this CPU"
fi

# ---- portable kernels have switches too
# the CUDA backend's kernels are in the plan on every machine, with their switches
expect attention.cuda \
  "kernel attention.cuda folded_gqa_attention (RAYLESS_KERNEL_FOLDED_GQA_ATTENTION=0: LibTorch's attention with enable_gqa, under a mask its math kernel)"
expect attention.cuda \
  "kernel attention.cuda LibTorch's attention with enable_gqa, under a mask its math kernel (folded_gqa_attention: RAYLESS_KERNEL_FOLDED_GQA_ATTENTION=0)" \
  RAYLESS_KERNEL_FOLDED_GQA_ATTENTION=0
expect rms_norm.cuda "kernel rms_norm.cuda fused_rms_norm (RAYLESS_KERNEL_FUSED_RMS_NORM=0: LibTorch's operators (transformers' formula))"
expect rms_norm.cuda "kernel rms_norm.cuda LibTorch's operators (transformers' formula) (fused_rms_norm: RAYLESS_KERNEL_FUSED_RMS_NORM=0)" \
  RAYLESS_KERNEL_FUSED_RMS_NORM=0
expect rotary.cuda "kernel rotary.cuda joint_rotary (RAYLESS_KERNEL_JOINT_ROTARY=0: LibTorch's operators (transformers' formula))"
expect rotary.cuda "kernel rotary.cuda LibTorch's operators (transformers' formula) (joint_rotary: RAYLESS_KERNEL_JOINT_ROTARY=0)" \
  RAYLESS_KERNEL_JOINT_ROTARY=0
expect rotary.decode "kernel rotary.decode LibTorch's operators (decode_rotary: RAYLESS_KERNEL_DECODE_ROTARY=0)" \
  RAYLESS_KERNEL_DECODE_ROTARY=0

# ---- bad values and unknown kernels: one error line naming the variable, exit 2, nothing on stdout
for bad in "RAYLESS_KERNEL_AVX2_LINEAR=yes" "RAYLESS_KERNEL_AVX512_TRANSPOS=0"; do
  out=$(env "$bad" "$rayless" version 2>err.txt); rc=$?
  [ $rc -eq 2 ] || fail "$bad: exit $rc, expected 2"
  [ -z "$out" ] || fail "$bad: printed on stdout: $out"
  [ "$(wc -l < err.txt)" -eq 1 ] && grep -q "^rayless: error: ${bad%%=*}" err.txt || fail "$bad: $(cat err.txt)"
done

# ---- a switch reaches the kernel: the decode attention kernel off changes float32 log-probs' bits;
# a bit-for-bit kernel (decode_rotary) off changes nothing
if flag avx2 && flag fma; then
  generate() { env "$@" "$rayless" generate --model configs/models/tiny --prompt "The rayless trainer" --max-new-tokens 40 --greedy --json; }
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  cd "$root" || exit 1
  plain=$(generate RAYLESS_UNUSED=1) || fail "generate"
  [ "$plain" != "$(generate RAYLESS_KERNEL_AVX2_DECODE_ATTENTION=0)" ] || fail "the decode attention switch changed nothing"
  [ "$plain" = "$(generate RAYLESS_KERNEL_DECODE_ROTARY=0)" ] || fail "decode_rotary off changed the output"
fi

[ $failures -eq 0 ] && echo "kernel switches: all checks passed"
exit $((failures > 0))
