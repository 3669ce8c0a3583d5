// The Jinja engine against transformers: every case in tests/data/chat-templates/cases.json (made by
// tools/make_chat_template_golden.py) renders byte-identical, and focused checks of Python semantics.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

#include "rayless/base/error.h"
#include "rayless/chat/jinja.h"

using nlohmann::ordered_json;
using rayless::jinja::RenderOptions;
using rayless::jinja::Template;

namespace {

const std::string kFixtureDir = std::string(RAYLESS_TEST_DATA) + "/chat-templates/";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

const ordered_json& fixture() {
  static const ordered_json cases = ordered_json::parse(read_text(kFixtureDir + "cases.json"));
  return cases;
}

// The fixture was rendered at a fixed time in UTC; strftime_now formats local time.
RenderOptions fixture_time() {
  setenv("TZ", "UTC", 1);
  tzset();
  RenderOptions options;
  options.now = fixture().at("now").get<std::time_t>();
  return options;
}

std::string render(const std::string& text, const ordered_json& context = ordered_json::object(),
                   const RenderOptions& options = {}) {
  return Template(text, "t.jinja").render(context, options);
}

// The message of the InputError that rendering `text` raises ("" when none).
std::string render_error(const std::string& text, const ordered_json& context = ordered_json::object()) {
  try {
    render(text, context);
  } catch (const rayless::InputError& e) {
    return e.what();
  }
  return "";
}

// Renders one fixture entry and checks it against what transformers did: the text, or the error line
// (and the message, for raise_exception and undefined values, whose wording we reproduce).
void check_fixture_entry(const std::string& name, const std::string& text, const ordered_json& entry) {
  INFO("case " << name);
  const ordered_json& context = entry.at("context");
  std::string rendered, error;
  try {
    rendered = Template(text, name).render(context, fixture_time());
  } catch (const rayless::InputError& e) {
    error = e.what();
  }
  if (!entry.contains("error_line")) {
    CHECK(error == "");
    CHECK(rendered == entry.at("expected").get<std::string>());
    return;
  }
  std::string prefix = name + ":" + std::to_string(entry.at("error_line").get<int>()) + ": ";
  INFO("error " << error);
  CHECK(error.rfind(prefix, 0) == 0);
  std::string type = entry.at("error_type");
  if (type == "TemplateError" || type == "UndefinedError") CHECK(error == prefix + entry.at("error_message").get<std::string>());
}

}  // namespace

TEST_CASE("every fixture template renders as transformers renders it", "[jinja][fixture]") {
  const ordered_json& cases = fixture().at("cases");
  REQUIRE(cases.size() >= 50);
  for (const auto& entry : cases) {
    std::string file = entry.at("template");
    check_fixture_entry(file + " / " + entry.at("name").get<std::string>(), read_text(kFixtureDir + file), entry);
  }
}

TEST_CASE("every fixture snippet renders as jinja2 renders it", "[jinja][fixture]") {
  const ordered_json& snippets = fixture().at("snippets");
  REQUIRE(snippets.size() >= 50);
  int index = 0;
  for (const auto& entry : snippets) check_fixture_entry("snippet-" + std::to_string(index++), entry.at("template"), entry);
}

TEST_CASE("values print as Python prints them", "[jinja]") {
  CHECK(render("{{ true }} {{ false }} {{ none }}") == "True False None");
  CHECK(render("{{ 1.0 }} {{ 0.1 }} {{ 1e-05 }} {{ 1e16 }} {{ 3 }} {{ 2.5e-4 }} {{ 1/3 }}") ==
        "1.0 0.1 1e-05 1e+16 3 0.00025 0.3333333333333333");
  CHECK(render("{{ ['a', 1, none, 1.5] }}") == "['a', 1, None, 1.5]");
  CHECK(render("{{ {'a': 1, 'b': true} }}") == "{'a': 1, 'b': True}");
  CHECK(render("{{ [\"it's\", 'x\\ny'] }}") == "[\"it's\", 'x\\ny']");
  CHECK(render("{{ (1,) }} {{ (1, 2) }}") == "(1,) (1, 2)");
  CHECK(render("{{ m }}", {{"m", {{"k", nullptr}, {"v", 2.0}}}}) == "{'k': None, 'v': 2.0}");
}

TEST_CASE("whitespace follows trim_blocks, lstrip_blocks and the - markers", "[jinja]") {
  CHECK(render("a\n  {% if true %}\n  b\n  {% endif %}\nc") == "a\n  b\nc");
  CHECK(render("a  {{- ' b ' -}}  c") == "a b c");
  CHECK(render("x {# note #}\ny") == "x y");
  CHECK(render("  {%+ if true %}k{% endif %}") == "  k");
  CHECK(render("{% if true +%}\nk{% endif %}") == "\nk");
  CHECK(render("{{ 'v' }}\n") == "v");          // one trailing newline of the template is dropped
  CHECK(render("{{ 'v' }}\n\n") == "v\n");
  CHECK(render("{% raw %}{{ x }}{% endraw %}") == "{{ x }}");
}

TEST_CASE("loops: loop variables, filters, else, break and continue", "[jinja]") {
  CHECK(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }},{% endfor %}") ==
        "12TrueFalse,21FalseFalse,30FalseTrue,");
  CHECK(render("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }} {% endfor %}") ==
        "-2-a 1-3-b 2--a ");
  CHECK(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}") == "2/2 4/2 ");
  CHECK(render("{% for x in [] %}x{% else %}none{% endfor %}") == "none");
  CHECK(render("{% for x in range(10) %}{% if x == 1 %}{% continue %}{% endif %}{% if x > 3 %}{% break %}{% endif %}{{ x }}{% endfor %}") == "023");
  CHECK(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}") == "a1b2");
  CHECK(render("{% set x = 1 %}{% for i in [5] %}{% set x = i %}{{ x }}{% endfor %}{{ x }}") == "51");
}

TEST_CASE("slicing and indexing follow Python", "[jinja]") {
  ordered_json ctx = {{"l", {0, 1, 2, 3, 4}}, {"s", "héllo"}};
  CHECK(render("{{ l[::-1] }}|{{ l[1:] }}|{{ l[-1] }}|{{ l[1:4:2] }}|{{ l[10:] }}|{{ l[-2:] }}", ctx) ==
        "[4, 3, 2, 1, 0]|[1, 2, 3, 4]|4|[1, 3]|[]|[3, 4]");
  CHECK(render("{{ s[1] }}|{{ s[::-1] }}|{{ s|length }}|{{ s[:2] }}", ctx) == "é|olléh|5|hé");
  CHECK(render("{{ l.0 }}{{ l[9] is defined }}", ctx) == "0False");
}

TEST_CASE("string methods behave as in Python", "[jinja]") {
  CHECK(render("{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\nhi\\n'.lstrip() }}|{{ 'a\\n\\n'.rstrip('\\n') }}") ==
        "x|hi|hi\n|a");
  CHECK(render("{{ 'a b  c'.split() }}|{{ 'a,b'.split(',') }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'a b c'.split(' ', 1) }}") ==
        "['a', 'b', 'c']|['a', 'b']|['a,b', 'c']|['a', 'b c']");
  CHECK(render("{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('bc') }}{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}") ==
        "TrueTrueABab");
  CHECK(render("{{ 'hi there'.title() }}|{{ 'hI'.capitalize() }}|{{ 'aa'.replace('a', 'b') }}|{{ 'abc'.find('c') }}") ==
        "Hi There|Hi|bb|2");
  CHECK(render("{{ ', '.join(['a', 'b']) }}|{{ 'a\\nb'.splitlines() }}|{{ '12'.isdigit() }}|{{ '{}-{}'.format(1, 'x') }}") ==
        "a, b|['a', 'b']|True|1-x");
}

TEST_CASE("operators: arithmetic, concatenation, membership, truthiness", "[jinja]") {
  CHECK(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 }} {{ 'ab' * 2 }} {{ [1] + [2] }}") ==
        "3 -4 2 3.5 8 abab [1, 2]");
  CHECK(render("{{ 'a' ~ 1 ~ none }} {{ 'x' in 'xyz' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }}") == "a1None True True True");
  CHECK(render("{{ 0 or 'd' }} {{ 1 and [] }} {{ not '' }} {{ 1 < 2 < 3 }} {{ 'y' if [] else 'n' }}") == "d [] True True n");
  CHECK_THAT(render_error("{{ 'a' + 1 }}"), Catch::StartsWith("t.jinja:1: can only concatenate str"));
}

TEST_CASE("tests: is defined, none, string, mapping, divisibleby, ...", "[jinja]") {
  CHECK(render("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is integer }}", {{"x", 1}}) ==
        "TrueTrueTrueTrueTrue");
  CHECK(render("{{ true is integer }}{{ true is number }}{{ {} is mapping }}{{ [] is iterable }}{{ 9 is divisibleby 3 }}") ==
        "FalseTrueTrueTrueTrue");
  CHECK(render("{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 'a' is in 'abc' }}{{ x is not none }}{{ false is sameas false }}", {{"x", 0}}) ==
        "TrueTrueTrueTrueTrue");
}

TEST_CASE("filters", "[jinja]") {
  ordered_json ctx = {{"msgs", {{{"role", "user"}, {"content", "a"}}, {{"role", "bot"}, {"content", "b"}}}}};
  CHECK(render("{{ msgs|map(attribute='role')|join(',') }}|{{ msgs|selectattr('role', 'equalto', 'bot')|list|length }}", ctx) ==
        "user,bot|1");
  CHECK(render("{{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='content')|first }}|{{ msgs|last|tojson }}", ctx) ==
        "b|{\"role\": \"bot\", \"content\": \"b\"}");
  CHECK(render("{{ ' x '|trim }}|{{ [3, 1, 2]|sort }}|{{ ['b', 'A']|sort }}|{{ ['a', 'A']|unique|list }}|{{ [1, 2]|sum }}") ==
        "x|[1, 2, 3]|['A', 'b']|['a']|3");
  CHECK(render("{{ missing|default('d') }}|{{ ''|default('e', true) }}|{{ '4.5'|float }}|{{ '7'|int }}|{{ 2.5|round }}") ==
        "d|e|4.5|7|2.0");
  CHECK(render("{{ {'b': 1, 'a': [1.0, none]}|tojson }}|{{ {'b': 1}|tojson(indent=2) }}") ==
        "{\"b\": 1, \"a\": [1.0, null]}|{\n  \"b\": 1\n}");
  CHECK(render("{{ 'é'|tojson }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }}") ==
        "\"é\"|{\"a\":2,\"b\":1}");
  CHECK(render("{{ 'a\\nb'|indent(2) }}|{{ [1, 2, 3]|batch(2)|list }}|{{ '<&>'|e }}|{{ {'b': 1, 'a': 2}|dictsort }}") ==
        "a\n  b|[[1, 2], [3]]|&lt;&amp;&gt;|[('a', 2), ('b', 1)]");
  CHECK_THAT(render_error("{{ 1|nosuchfilter }}"), Catch::StartsWith("t.jinja:1: No filter named 'nosuchfilter'"));
}

TEST_CASE("undefined values: empty, falsy, and errors on attribute access", "[jinja]") {
  CHECK(render("[{{ nope }}]{{ nope is defined }}{{ nope|length }}{% for x in nope %}x{% endfor %}{% if not nope %}F{% endif %}") ==
        "[]False0F");
  CHECK(render("{{ d.missing is defined }}", {{"d", ordered_json::object()}}) == "False");
  CHECK(render_error("\n{{ nope.attr }}") == "t.jinja:2: 'nope' is undefined");
  CHECK(render_error("{{ d.a.b }}", {{"d", ordered_json::object()}}) == "t.jinja:1: 'dict object' has no attribute 'a'");
  CHECK(render_error("{{ nope() }}") == "t.jinja:1: 'nope' is undefined");
}

TEST_CASE("namespace, set blocks, macros, call blocks and the generation tag", "[jinja]") {
  CHECK(render("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}") == "3");
  CHECK(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set s %}[{{ a }}]{% endset %}{{ s }}") == "12[1]");
  CHECK(render("{% macro m(x, y='d') %}{{ x }}{{ y }}{% endmacro %}{{ m(1) }}{{ m(2, y='e') }}") == "1d2e");
  CHECK(render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}") == "<in>");
  CHECK(render("{% generation %}body {{ 1 }}{% endgeneration %}") == "body 1");
  CHECK(render("{% filter upper %}abc{% endfilter %}") == "ABC");
  CHECK(render("{{ dict(a=1)|tojson }}{{ range(3)|list }}") == "{\"a\": 1}[0, 1, 2]");
}

TEST_CASE("globals: raise_exception and strftime_now", "[jinja]") {
  CHECK(render_error("ok\n{{ raise_exception('Roles must alternate') }}") == "t.jinja:2: Roles must alternate");
  setenv("TZ", "UTC", 1);
  tzset();
  RenderOptions at;
  at.now = 1721995200;  // 2024-07-26 12:00 UTC
  CHECK(render("{{ strftime_now('%d %b %Y %H:%M') }}", ordered_json::object(), at) == "26 Jul 2024 12:00");
  CHECK(render("{{ strftime_now('%Y') }}").size() == 4);
}

TEST_CASE("errors: syntax errors name the line, the sandbox refuses mutation", "[jinja]") {
  CHECK_THROWS_AS(Template("{% if x %}\n{% endfor %}", "bad.jinja"), rayless::InputError);
  CHECK_THROWS_WITH(Template("a\nb\n{{ 1 + }}", "bad.jinja"), Catch::StartsWith("bad.jinja:3: "));
  CHECK_THROWS_WITH(Template("{% for x in y %}\n", "bad.jinja"), Catch::StartsWith("bad.jinja:"));
  CHECK_THROWS_WITH(Template("{% nosuchtag %}", "bad.jinja"), Catch::Contains("unknown tag 'nosuchtag'"));
  CHECK(render_error("{% set l = [1] %}\n{{ l.append(2) }}") == "t.jinja:2: access to attribute 'append' of 'list' object is unsafe.");
  CHECK_THAT(render_error("{{ 'abc'() }}"), Catch::StartsWith("t.jinja:1: 'str' object is not callable"));
  CHECK_THAT(render_error("{% set ns = namespace() %}{% set ns._x = 1 %}"), Catch::Contains("underscore-prefixed"));
  CHECK_THROWS_AS(Template("{{ x }}", "t").render(ordered_json::array()), rayless::InputError);
}
