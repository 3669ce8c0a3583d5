#include <catch2/catch.hpp>

#include "model/helpers.h"
#include "rayless/base/error.h"
#include "rayless/hf/tokenizer.h"

using namespace rayless;

TEST_CASE("byte tokenizer: bytes, specials never split, lossy decode") {
  auto tok = make_byte_tokenizer();
  CHECK(tok->encode("hi") == std::vector<int64_t>{'h', 'i'});
  CHECK(tok->encode("a<|eos|>b") == std::vector<int64_t>{'a', 258, 'b'});
  CHECK(tok->encode("<|im_start|>user") == std::vector<int64_t>{259, 'u', 's', 'e', 'r'});
  CHECK(tok->encode("<|eos") == std::vector<int64_t>{'<', '|', 'e', 'o', 's'});
  const std::string text = "naïve 😀 <|im_end|>";
  CHECK(tok->decode(tok->encode(text)) == text);
  CHECK(tok->decode(tok->encode(text), true) == "naïve 😀 ");
  CHECK(tok->decode({0xF0, 0x9F}) == "\xEF\xBF\xBD");  // a cut emoji becomes one U+FFFD
  CHECK(tok->eos_ids() == std::vector<int64_t>{258, 260});
  CHECK(tok->pad_id() == 256);
  CHECK(tok->vocab_size() == 261);
  CHECK(tok->hash() == make_byte_tokenizer()->hash());
}

TEST_CASE("byte tokenizer as tokenizer.json gives the same ids through the BPE path") {
  auto byte = make_byte_tokenizer();
  auto as_bpe = parse_bpe_tokenizer(byte->to_json(), "byte tokenizer.json");
  for (const std::string s : {"hello world", "  spaces\n\ttabs", "中文 😀", "<|im_start|>x<|im_end|>", ""}) {
    CHECK(as_bpe->encode(s) == byte->encode(s));
    CHECK(as_bpe->decode(byte->encode(s)) == byte->decode(byte->encode(s)));
  }
  CHECK(as_bpe->hash() == byte->hash());
}

TEST_CASE("the embedded tiny model's tokenizer.json is the byte tokenizer") {
  const auto file = std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny/tokenizer.json";
  REQUIRE(std::filesystem::exists(file));
  CHECK(read_text_file(file) == make_byte_tokenizer()->to_json());
  auto tok = load_tokenizer("", file.parent_path());
  CHECK(tok->eos_ids() == std::vector<int64_t>{258, 260});
  CHECK(tok->encode("hi") == std::vector<int64_t>{'h', 'i'});
}

// Regenerates configs/models/tiny/tokenizer.json (hidden: run by hand with test-model "[.write-tiny-tokenizer]").
TEST_CASE("write the tiny tokenizer", "[.write-tiny-tokenizer]") {
  write_text_atomically(std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny/tokenizer.json",
                        make_byte_tokenizer()->to_json());
}

TEST_CASE("BPE tokenizers match the tokenizers library on ~200 strings") {
  for (const std::string style : {"qwen2", "gpt2"}) {
    auto tok = load_tokenizer((test::golden_dir() / ("tokenizer-" + style + ".json")).string());
    const auto cases = test::read_json(test::golden_dir() / ("tokenizer-" + style + "-cases.json"));
    size_t checked = 0;
    for (const auto& c : cases["encode"]) {
      const std::string text = c["text"].get<std::string>();
      const auto expected = c["ids"].get<std::vector<int64_t>>();
      INFO(style << " text: " << text);
      CHECK(tok->encode(text) == expected);
      CHECK(tok->decode(expected) == c["decoded"].get<std::string>());
      CHECK(tok->decode(expected, true) == c["decoded_skip_special"].get<std::string>());
      ++checked;
    }
    CHECK(checked >= 200);
    for (const auto& c : cases["decode"]) {
      INFO(style << " decode " << c["ids"].dump());
      CHECK(tok->decode(c["ids"].get<std::vector<int64_t>>()) == c["decoded"].get<std::string>());
    }
    CHECK(tok->token_to_id("<|im_end|>").has_value());
    CHECK(tok->eos_ids().front() == *tok->token_to_id("<|im_end|>"));
  }
}

TEST_CASE("corrupt tokenizer.json is an InputError naming the file") {
  auto dir = test::scratch_dir("tok-corrupt");
  auto expect_error = [&](const std::string& name, const std::string& text, const std::string& fragment) {
    write_text_atomically(dir / name, text);
    try {
      load_tokenizer((dir / name).string());
      FAIL("no error for " << name);
    } catch (const InputError& e) {
      const std::string message = e.what();
      INFO(message);
      CHECK(message.find(name) != std::string::npos);
      CHECK(message.find(fragment) != std::string::npos);
    }
  };
  expect_error("truncated.json", R"({"model": {"type": "BPE", "vocab": {"a": 0)", "invalid JSON");
  expect_error("nomodel.json", R"({"added_tokens": []})", "model");
  expect_error("unigram.json", R"({"model": {"type": "Unigram", "vocab": []}})", "Unigram");
  expect_error("badmerge.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})", "merge #0");
  expect_error("badvocab.json", R"({"model": {"type": "BPE", "vocab": {"a": "zero"}}})", "vocab entry");
  expect_error("badregex.json",
               R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}}})",
               "regex");
  expect_error("normalizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "normalizer": {"type": "Lowercase"}})",
               "Lowercase");
  CHECK_THROWS_AS(load_tokenizer((dir / "missing.json").string()), InputError);
  // a byte-level vocabulary without one of the 256 byte symbols: refused at load, not when some text
  // first needs it (fuzz regression tests/data/fuzz/regressions/tokenizer/)
  nlohmann::json tiny = nlohmann::json::parse(read_text_file(RAYLESS_SOURCE_DIR "/configs/models/tiny/tokenizer.json"));
  tiny["model"]["vocab"].erase("H");
  tiny["model"]["merges"] = nlohmann::json::array();
  expect_error("no-H.json", tiny.dump(), "model.vocab has no token for byte 0x48 (\"H\")");
}

TEST_CASE("a directory transformers loads as a SentencePiece-style LlamaTokenizer is refused naming the class") {
  // Llama 2 / Mistral 7B style: LlamaTokenizerFast over a tokenizer.json that is not byte-level
  auto dir = test::scratch_dir("tok-llama-class");
  write_text_atomically(dir / "config.json", R"({"model_type": "llama"})");
  write_text_atomically(dir / "tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizerFast"})");
  write_text_atomically(dir / "tokenizer.json",
                        R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"<unk>": 0}, "merges": []},
                            "pre_tokenizer": {"type": "Metaspace", "replacement": "_"}})");
  try {
    load_tokenizer("", dir);
    FAIL("no error");
  } catch (const InputError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find((dir / "tokenizer.json").string()) != std::string::npos);
    CHECK(message.find("loads LlamaTokenizer") != std::string::npos);
    CHECK(message.find("tokenizer_config.json names LlamaTokenizerFast") != std::string::npos);
  }
}
