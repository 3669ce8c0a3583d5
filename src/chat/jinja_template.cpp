// Template: parses once, renders many times. Installs the globals transformers gives chat templates
// (raise_exception, strftime_now, namespace, dict) and jinja2's (range, joiner, cycler), and turns
// template errors into InputError "<source>:<line>: <message>".
#include "rayless/chat/jinja.h"

#include "chat/jinja_internal.h"
#include "rayless/base/error.h"

namespace rayless::jinja {
namespace detail {
namespace {

constexpr std::int64_t kMaxRange = 100000;  // jinja2's sandbox refuses larger ranges

Value range_function(Renderer&, const CallArgs& a) {
  std::vector<std::int64_t> n;
  for (const auto& v : a.positional) {
    if (!v.is_integral()) fail("'" + type_name(v) + "' object cannot be interpreted as an integer");
    n.push_back(v.as_int());
  }
  if (n.empty() || n.size() > 3) fail("range expected 1 to 3 arguments, got " + std::to_string(n.size()));
  std::int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0], step = n.size() > 2 ? n[2] : 1;
  if (step == 0) fail("range() arg 3 must not be zero");
  List out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<std::int64_t>(out.size()) >= kMaxRange) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.push_back(Value::from(i));
  }
  return Value::from(std::move(out));
}

// dict(...) and namespace(...): a mapping from positional mappings then keyword arguments.
Value mapping_from(const CallArgs& a, bool is_namespace) {
  auto d = std::make_shared<Dict>();
  d->is_namespace = is_namespace;
  for (const auto& p : a.positional) {
    if (p.is_dict()) {
      for (const auto& kv : p.dict->items) d->set(kv.first, kv.second);
    } else {
      for (const auto& pair : iterate(p)) {
        auto kv = iterate(pair);
        if (kv.size() != 2) fail("dictionary update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
        d->set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& kv : a.keyword) d->set(Value::from(kv.first), kv.second);
  if (is_namespace) {
    for (const auto& kv : d->items)
      if (kv.first.is_string() && !kv.first.text.empty() && kv.first.text[0] == '_')
        fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got " + string_repr(kv.first.text) + ". Please rename the attribute.");
  }
  return Value::from(d);
}

Value strftime_now(Renderer& r, const CallArgs& a) {
  const Value* format = a.get(0, "format");
  if (!format || !format->is_string()) fail("strftime_now() needs a format string");
  std::time_t now = r.now() ? r.now() : std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::vector<char> buf(256 + format->text.size() * 16);
  std::size_t n = std::strftime(buf.data(), buf.size(), format->text.c_str(), &local);
  return Value::from(std::string(buf.data(), n));
}

Value joiner(Renderer&, const CallArgs& a) {
  const Value* sep = a.get(0, "sep");
  std::string separator = sep ? to_str(*sep) : ", ";
  auto used = std::make_shared<bool>(false);
  return make_function("joiner", [separator, used](Renderer&, const CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::from("");
    }
    return Value::from(separator);
  });
}

}  // namespace

void Renderer::install_globals(const nlohmann::ordered_json& context) {
  Frame& globals = frames_[0];
  globals.emplace_back("range", make_function("range", range_function));
  globals.emplace_back("dict", make_function("dict", [](Renderer&, const CallArgs& a) { return mapping_from(a, false); }));
  globals.emplace_back("namespace", make_function("namespace", [](Renderer&, const CallArgs& a) { return mapping_from(a, true); }));
  globals.emplace_back("joiner", make_function("joiner", joiner));
  globals.emplace_back("raise_exception", make_function("raise_exception", [](Renderer&, const CallArgs& a) -> Value {
    const Value* message = a.get(0, "message");
    fail(message ? to_str(*message) : "");
  }));
  globals.emplace_back("strftime_now", make_function("strftime_now", strftime_now));
  for (const auto& kv : context.items()) globals.emplace_back(kv.key(), from_json(kv.value()));
}

}  // namespace detail

struct Template::Impl {
  std::string source_name;
  detail::Body body;
};

Template::Template(const std::string& text, std::string source_name) : impl_(std::make_unique<Impl>()) {
  impl_->source_name = std::move(source_name);
  try {
    impl_->body = detail::parse(detail::tokenize(text));
  } catch (const detail::TemplateError& e) {
    throw InputError(str(impl_->source_name, ":", e.line, ": ", e.what()));
  }
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  inputCheck(context.is_object(), impl_->source_name, ": the template context must be a JSON object");
  try {
    detail::Renderer renderer(context, options.now);
    return renderer.render(impl_->body);
  } catch (const detail::TemplateError& e) {
    std::string message = e.what();
    for (char& c : message)
      if (c == '\n' || c == '\r') c = ' ';
    throw InputError(str(impl_->source_name, ":", e.line, ": ", message));
  }
}

}  // namespace rayless::jinja
