// The CPU backend's table (backend.h): every op it implements itself, each entry in cpu_backend.h.
#include "ops/backend.h"
#include "ops/cpu/cpu_backend.h"

namespace rayless::ops {

const BackendTable& cpu_table() {
  static const BackendTable table = [] {
    BackendTable t;
    t.name = "cpu";
    t.linear = cpu::linear;
    t.transposed = cpu::transposed;
    t.widens_bfloat16_products = true;
    t.pack_generation_weight = cpu::pack_generation_weight;
    t.packed_linear = cpu::packed_linear;
    t.scaled_attention = cpu::scaled_attention;
    t.scaled_attention_buckets = cpu::scaled_attention_buckets;
    t.attends_in_buckets = cpu::attends_in_buckets;
    t.padded_attention = cpu::decode_attention;
    t.rms_norm = cpu::rms_norm;
    t.decode_rms_norm = cpu::decode_rms_norm;
    t.apply_rotary = cpu::apply_rotary;
    t.decode_rotary = cpu::decode_rotary;
    t.silu_times_down = cpu::silu_times_down;
    t.silu_times_backward = cpu::silu_times_backward;
    t.decode_silu_times = cpu::decode_silu_times;
    t.adamw_update = cpu::adamw_update;
    t.sum_of_squares = cpu::sum_of_squares;
    return t;
  }();
  return table;
}

}  // namespace rayless::ops
