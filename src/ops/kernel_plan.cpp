// The kernel plan; see include/rayless/ops/kernel_plan.h. The one file that reads the kernel switches.
#include "rayless/ops/kernel_plan.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/x86/amx/amx_kernels.h"
#include "rayless/base/cpu_features.h"
#include "rayless/base/error.h"

extern char** environ;

namespace rayless::ops {

namespace {

// The instruction sets with a switch of their own (RAYLESS_AVX2, RAYLESS_AVX512, RAYLESS_AMX).
enum class Isa { portable, avx2, avx512, amx };

const char* isa_switch(Isa isa) {
  switch (isa) {
    case Isa::avx2: return "RAYLESS_AVX2";
    case Isa::avx512: return "RAYLESS_AVX512";
    case Isa::amx: return "RAYLESS_AMX";
    default: return nullptr;
  }
}

struct KernelSpec {
  Kernel kernel;
  const char* name;
  Isa isa;
};

// In Kernel's order.
constexpr std::array<KernelSpec, kKernelCount> kKernels{{
    {Kernel::autocast_linear, "autocast_linear", Isa::portable},
    {Kernel::transpose_tiles, "transpose_tiles", Isa::portable},
    {Kernel::onednn_linear, "onednn_linear", Isa::portable},
    {Kernel::attention_float32_backward, "attention_float32_backward", Isa::portable},
    {Kernel::length_buckets, "length_buckets", Isa::portable},
    {Kernel::rms_norm_one_pass_backward, "rms_norm_one_pass_backward", Isa::portable},
    {Kernel::rotary_one_pass, "rotary_one_pass", Isa::portable},
    {Kernel::decode_rotary, "decode_rotary", Isa::portable},
    {Kernel::silu_times_down, "silu_times_down", Isa::portable},
    {Kernel::silu_times_one_pass_backward, "silu_times_one_pass_backward", Isa::portable},
    {Kernel::adamw_single_pass, "adamw_single_pass", Isa::portable},
    {Kernel::sum_of_squares_single_pass, "sum_of_squares_single_pass", Isa::portable},
    {Kernel::folded_gqa_attention, "folded_gqa_attention", Isa::portable},
    {Kernel::fused_rms_norm, "fused_rms_norm", Isa::portable},
    {Kernel::joint_rotary, "joint_rotary", Isa::portable},
    {Kernel::avx2_linear, "avx2_linear", Isa::avx2},
    {Kernel::avx2_decode_attention, "avx2_decode_attention", Isa::avx2},
    {Kernel::avx2_decode_rms_norm, "avx2_decode_rms_norm", Isa::avx2},
    {Kernel::avx2_decode_silu_times, "avx2_decode_silu_times", Isa::avx2},
    {Kernel::avx2_adamw, "avx2_adamw", Isa::avx2},
    {Kernel::avx2_sum_of_squares, "avx2_sum_of_squares", Isa::avx2},
    {Kernel::avx512_rms_norm_backward, "avx512_rms_norm_backward", Isa::avx512},
    {Kernel::avx512_rotary_forward, "avx512_rotary_forward", Isa::avx512},
    {Kernel::avx512_rotary_backward, "avx512_rotary_backward", Isa::avx512},
    {Kernel::avx512_silu_times_backward, "avx512_silu_times_backward", Isa::avx512},
    {Kernel::avx512_transpose, "avx512_transpose", Isa::avx512},
    {Kernel::avx512_adamw, "avx512_adamw", Isa::avx512},
    {Kernel::avx512_sum_of_squares, "avx512_sum_of_squares", Isa::avx512},
    {Kernel::amx_linear, "amx_linear", Isa::amx},
}};

const KernelSpec& spec(Kernel kernel) { return kKernels[static_cast<size_t>(kernel)]; }

constexpr const char* kKernelSwitchPrefix = "RAYLESS_KERNEL_";

std::string upper(const char* name) {
  std::string out(name);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// An instruction set's switch keeps its meaning from before the plan: "0" turns its kernels off,
// any other value leaves them as the CPU allows.
bool isa_switched_off(Isa isa) {
  const char* variable = isa_switch(isa);
  const char* value = variable ? std::getenv(variable) : nullptr;
  return value && std::string(value) == "0";
}

// A kernel's own switch: unset, 0 or 1; any other value, or a RAYLESS_KERNEL_ variable that names no
// kernel, is an input error.
std::optional<bool> kernel_switch(Kernel kernel) {
  const std::string variable = KernelPlan::switch_name(kernel);
  const char* value = std::getenv(variable.c_str());
  if (!value) return std::nullopt;
  const std::string text(value);
  inputCheck(text == "0" || text == "1", variable, " = \"", text,
             "\": a kernel switch is 0 (off) or 1 (on wherever the CPU can run it); docs/kernels.md");
  return text == "1";
}

void check_kernel_switch_names() {
  const size_t prefix = std::strlen(kKernelSwitchPrefix);
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string variable(*entry, std::strcspn(*entry, "="));
    if (variable.compare(0, prefix, kKernelSwitchPrefix) != 0) continue;
    bool known = false;
    for (const KernelSpec& k : kKernels) known = known || variable == KernelPlan::switch_name(k.kernel);
    inputCheck(known, variable, " names no kernel (the kernels and their switches: rayless version, docs/kernels.md)");
  }
}

}  // namespace

// What the plan knows of each kernel: fixed at construction, but for the tests' overrides.
struct KernelState {
  bool runnable = false;       // the CPU (and LibTorch, the OS) can run it
  std::string missing;         // why not, where not runnable
  bool preferred = true;       // the plan would choose it where runnable
  std::string not_preferred;   // why not, where not preferred
  bool isa_off = false;        // its instruction set's switch is 0
  std::optional<bool> env;     // its own switch
  std::atomic<int> override_{-1};  // -1: none; 0 / 1: a KernelOverride's
  std::atomic<bool> on{false};
};

namespace {

std::array<KernelState, kKernelCount>& states() {
  static std::array<KernelState, kKernelCount> all;
  return all;
}

// What the CPU offers each instruction set's kernels, or why they cannot run.
void check_cpu(Kernel kernel, KernelState& s) {
  const Isa isa = spec(kernel).isa;
#ifndef RAYLESS_X86_KERNELS
  if (isa != Isa::portable) {
    s.runnable = false;
    s.missing = "not an x86-64 build";
    return;
  }
#endif
  switch (isa) {
    case Isa::portable:
      s.runnable = true;
      if (kernel == Kernel::onednn_linear && !cpu::onednn_linear_available()) {
        s.runnable = false;
        s.missing = "LibTorch has no oneDNN";
      }
      return;
    case Isa::avx2: {
      const bool fma_needed = kernel != Kernel::avx2_adamw && kernel != Kernel::avx2_sum_of_squares;
      s.runnable = cpu_has_avx2() && (!fma_needed || cpu_has_fma());
      s.missing = fma_needed ? "no AVX2 with FMA on this CPU" : "no AVX2 on this CPU";
      if (kernel == Kernel::avx2_linear && cpu_has_avx512f()) {
        // oneDNN's AVX-512 kernel was as fast as a hand-written one (docs/kernels.md)
        s.preferred = false;
        s.not_preferred = "oneDNN is as fast on a CPU with AVX-512";
      }
      return;
    }
    case Isa::avx512:
      s.runnable = cpu_has_avx512f();
      s.missing = "no AVX-512 on this CPU";
      return;
    case Isa::amx:
      s.runnable = cpu_has_amx_bf16();
      s.missing = "no AMX tiles on this CPU";
#ifdef RAYLESS_X86_KERNELS
      // Linux hands out the tile state only on request; not asked for where the switch is off
      if (s.runnable && !s.isa_off && s.env != std::optional<bool>(false) && !amx::request_tile_permission()) {
        s.runnable = false;
        s.missing = "Linux did not grant this process the AMX tile state";
      }
#endif
      return;
  }
}

bool default_on(const KernelState& s) {
  if (!s.runnable || s.isa_off || s.env == std::optional<bool>(false)) return false;
  return s.preferred || s.env == std::optional<bool>(true);
}

void settle(KernelState& s) {
  const int forced = s.override_.load();
  const bool allowed = s.runnable && !s.isa_off && s.env != std::optional<bool>(false);
  s.on.store(forced < 0 ? default_on(s) : (forced == 1 && allowed));
}

// ---- the plan's entries: an op, or one case of it ----

struct Candidate {
  Kernel kernel;
  std::vector<Kernel> needs;  // kernels it runs inside, which must be on too
};

struct Entry {
  const char* name;
  std::vector<Candidate> chain;  // the first candidate that is on (with what it needs) runs
  const char* reference;         // what runs where none is, and on other devices
};

const std::vector<Entry>& plan_entries() {
  using K = Kernel;
  static const std::vector<Entry> entries{
      {"linear", {{K::autocast_linear, {}}}, "LibTorch's linear under autocast"},
      {"transpose", {{K::avx512_transpose, {K::transpose_tiles}}, {K::transpose_tiles, {}}}, "LibTorch's strided copy"},
      {"bfloat16_products", {}, ""},
      {"generation_linear.float32", {{K::avx2_linear, {}}, {K::onednn_linear, {}}}, "LibTorch's linear (MKL)"},
      {"generation_linear.bfloat16", {{K::amx_linear, {}}, {K::onednn_linear, {}}}, "LibTorch's linear"},
      {"attention.backward", {{K::attention_float32_backward, {}}}, "LibTorch's flash attention and its backward"},
      {"attention.packed", {{K::length_buckets, {}}}, "one padded attention call per pass"},
      {"attention.decode", {{K::avx2_decode_attention, {}}}, "LibTorch's flash kernel"},
      {"attention.cuda", {{K::folded_gqa_attention, {}}},
       "LibTorch's attention with enable_gqa, under a mask its math kernel"},
      {"rms_norm.backward",
       {{K::avx512_rms_norm_backward, {K::rms_norm_one_pass_backward}}, {K::rms_norm_one_pass_backward, {}}},
       "autograd's backward of LibTorch's operators"},
      {"rms_norm.decode", {{K::avx2_decode_rms_norm, {}}}, "LibTorch's operators"},
      {"rms_norm.cuda", {{K::fused_rms_norm, {}}}, "LibTorch's operators (transformers' formula)"},
      {"rotary.forward", {{K::avx512_rotary_forward, {K::rotary_one_pass}}, {K::rotary_one_pass, {}}},
       "LibTorch's operators"},
      {"rotary.backward", {{K::avx512_rotary_backward, {K::rotary_one_pass}}, {K::rotary_one_pass, {}}},
       "autograd's backward of LibTorch's operators"},
      {"rotary.decode", {{K::decode_rotary, {}}}, "LibTorch's operators"},
      {"rotary.cuda", {{K::joint_rotary, {}}}, "LibTorch's operators (transformers' formula)"},
      {"silu_times.backward",
       {{K::avx512_silu_times_backward, {K::silu_times_one_pass_backward, K::silu_times_down}},
        {K::silu_times_one_pass_backward, {K::silu_times_down}},
        {K::silu_times_down, {}}},
       "autograd's backward (gate and up kept, the product not)"},
      {"silu_times.decode", {{K::avx2_decode_silu_times, {}}}, "LibTorch's silu and mul"},
      {"adamw_update",
       {{K::avx512_adamw, {K::adamw_single_pass}}, {K::avx2_adamw, {K::adamw_single_pass}}, {K::adamw_single_pass, {}}},
       "LibTorch's tensor ops"},
      {"sum_of_squares",
       {{K::avx512_sum_of_squares, {K::sum_of_squares_single_pass}},
        {K::avx2_sum_of_squares, {K::sum_of_squares_single_pass}},
        {K::sum_of_squares_single_pass, {}}},
       "LibTorch's float64 sums"},
      {"fused_logprobs", {}, "LibTorch's operators, chunk by chunk (no kernel of rayless's own)"},
  };
  return entries;
}

// Why a kernel is off now; empty when on.
std::string off_reason(Kernel kernel) {
  const KernelState& s = states()[static_cast<size_t>(kernel)];
  if (s.on.load()) return "";
  if (!s.runnable) return s.missing;
  if (s.override_.load() == 0) return "switched off in this process";
  if (s.isa_off) return std::string(isa_switch(spec(kernel).isa)) + "=0";
  if (s.env == std::optional<bool>(false)) return KernelPlan::switch_name(kernel) + "=0";
  return s.not_preferred + ", " + KernelPlan::switch_name(kernel) + "=1 runs it";
}

bool candidate_on(const Candidate& c) {
  const KernelPlan& plan = kernel_plan();
  if (!plan.on(c.kernel)) return false;
  return std::all_of(c.needs.begin(), c.needs.end(), [&](Kernel k) { return plan.on(k); });
}

// "RAYLESS_KERNEL_X=0" (or its instruction set's switch too)
std::string how_to_switch_off(Kernel kernel) {
  std::string out = KernelPlan::switch_name(kernel) + "=0";
  if (const char* group = isa_switch(spec(kernel).isa)) out += std::string(" or ") + group + "=0";
  return out;
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : separator) + part;
  return out;
}

// "<implementation> (<why>)" of an entry's chain: the candidate that runs (or the reference), why each
// before it does not, and what its switch falls back to.
std::string describe_chain(const std::vector<Candidate>& chain, const char* reference) {
  std::vector<std::string> notes;
  for (size_t i = 0; i < chain.size(); ++i) {
    const Candidate& c = chain[i];
    if (!candidate_on(c)) {
      std::string why = off_reason(c.kernel);
      for (Kernel need : c.needs)
        if (why.empty() && !kernel_plan().on(need)) why = std::string("needs ") + KernelPlan::name(need);
      notes.push_back(std::string(KernelPlan::name(c.kernel)) + ": " + why);
      continue;
    }
    // what runs with this candidate off: the next on, or the reference
    std::string next = reference;
    for (size_t j = i + 1; j < chain.size(); ++j)
      if (candidate_on(chain[j])) {
        next = KernelPlan::name(chain[j].kernel);
        break;
      }
    for (Kernel need : c.needs) notes.push_back(std::string("in ") + KernelPlan::name(need));
    notes.push_back(how_to_switch_off(c.kernel) + ": " + next);
    return std::string(KernelPlan::name(c.kernel)) + " (" + join(notes, "; ") + ")";
  }
  return std::string(reference) + (notes.empty() ? "" : " (" + join(notes, "; ") + ")");
}

std::string describe_entry(const Entry& e) {
  const KernelPlan& plan = kernel_plan();
  const std::string name(e.name);
  if (name == "bfloat16_products") {
    const bool widened = plan.bfloat16_products() == BFloat16Products::float32;
    return name + " " + to_string(plan.bfloat16_products()) +
           (widened ? " (bfloat16 values multiplied as float32 and rounded once; train.bf16_products)"
                    : " (LibTorch's bfloat16 kernels; train.bf16_products sets this for a training run)");
  }
  if (name == "generation_linear.bfloat16") {
    if (plan.bfloat16_products() == BFloat16Products::float32)  // the float32 entry's kernels, on the widened values
      for (const Entry& other : plan_entries())
        if (std::string(other.name) == "generation_linear.float32")
          return name + " widened to float32 (train.bf16_products = float32), on " +
                 describe_chain(other.chain, other.reference);
    if (!cpu::onednn_bfloat16_supported()) {  // oneDNN's packed bfloat16 layout needs its bfloat16 kernels
      const std::vector<Candidate> tiles_only{e.chain.front()};
      return name + " " + describe_chain(tiles_only, "LibTorch's linear (oneDNN has no bfloat16 kernel on this CPU)");
    }
  }
  return name + " " + describe_chain(e.chain, e.reference);
}

std::atomic<BFloat16Products> bfloat16_setting{BFloat16Products::bfloat16};

}  // namespace

bool KernelPlan::on(Kernel kernel) const { return states()[static_cast<size_t>(kernel)].on.load(std::memory_order_relaxed); }

const char* KernelPlan::name(Kernel kernel) { return spec(kernel).name; }

std::string KernelPlan::switch_name(Kernel kernel) { return kKernelSwitchPrefix + upper(spec(kernel).name); }

BFloat16Products KernelPlan::bfloat16_products() const { return bfloat16_setting.load(std::memory_order_relaxed); }

void KernelPlan::set_bfloat16_products(BFloat16Products how) { bfloat16_setting.store(how, std::memory_order_relaxed); }

std::vector<std::string> KernelPlan::describe() const {
  std::vector<std::string> lines;
  for (const Entry& e : plan_entries()) lines.push_back(describe_entry(e));
  return lines;
}

std::vector<std::string> KernelPlan::entries() {
  std::vector<std::string> names;
  for (const Entry& e : plan_entries()) names.emplace_back(e.name);
  return names;
}

KernelPlan& kernel_plan() {
  static KernelPlan plan = [] {
    check_kernel_switch_names();
    for (const KernelSpec& k : kKernels) {
      KernelState& s = states()[static_cast<size_t>(k.kernel)];
      s.isa_off = isa_switched_off(k.isa);
      s.env = kernel_switch(k.kernel);
      check_cpu(k.kernel, s);
      settle(s);
    }
    return KernelPlan();
  }();
  return plan;
}

KernelOverride::KernelOverride(Kernel kernel, bool on) : kernel_(kernel) {
  kernel_plan();
  KernelState& s = states()[static_cast<size_t>(kernel)];
  previous_ = s.override_.exchange(on ? 1 : 0);
  settle(s);
}

KernelOverride::~KernelOverride() {
  KernelState& s = states()[static_cast<size_t>(kernel_)];
  s.override_.store(previous_);
  settle(s);
}

BFloat16Products bfloat16_products_for(const std::string& value) {
  if (value == "bfloat16") return BFloat16Products::bfloat16;
  if (value == "float32") return BFloat16Products::float32;
  runtimeCheck(value == "auto", "train.bf16_products = \"", value, "\": expected auto, bfloat16 or float32");
  return cpu_has_bfloat16_units() ? BFloat16Products::bfloat16 : BFloat16Products::float32;
}

const char* to_string(BFloat16Products how) { return how == BFloat16Products::float32 ? "float32" : "bfloat16"; }

}  // namespace rayless::ops
