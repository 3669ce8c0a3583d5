// libFuzzer target: a Hugging Face tokenizer.json (vocab, merges, added tokens, normalizer and
// pre-tokenizer with its regexes, decoder), then used: encode a few fixed strings and decode them.
#include "fuzz_input.h"
#include "rayless/hf/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return rayless::fuzz::parse_or_refuse([&] {
    auto tokenizer = rayless::parse_bpe_tokenizer(text, "tokenizer.json");
    for (const char* sample : {"Hello, world! 123", "  tabs\tand\nnewlines  ", "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82", ""}) {
      const auto ids = tokenizer->encode(sample);
      tokenizer->decode(ids);
    }
  });
}
