// Configuration tables. Every configuration key is one row (ConfigField): its dotted name, where its value lives,
// what it may be, and a line of help; every enum has one name table (EnumNames). The JSON and --set parsers, the
// validators, --help-config and the config.json writer all read these rows, so a key is declared once.
// The tables: fields() in model/config.cpp (model, train.*, aah.regime, aah.attention) and controller_knobs() in
// controller/controller_config.cpp (the controller's aah.* knobs). A key's default is the member's initializer in
// its config struct; a table read over a default-constructed struct shows it.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace aah {

// ---- names ----

using NameList = std::vector<const char*>;

// One name table per enum: names[i] names E(i), i.e. the enum's values are 0, 1, ... in the table's order.
template <class E>
struct EnumNames {
  NameList names;
};

std::string names_text(const NameList& names);             // "a, b, c"
int name_index(const NameList& names, const std::string& s);  // -1 when s is not one of them

template <class E>
const char* enum_name(const EnumNames<E>& t, E e) {
  const size_t i = size_t(e);
  return i < t.names.size() ? t.names[i] : "?";
}

// The value named s; else "[config] key 'KEY' must be one of a, b, c, got 'S'".
template <class E>
E enum_from_name(const EnumNames<E>& t, const std::string& s, const char* key) {
  const int i = name_index(t.names, s);
  if (i < 0) fail("[config] key '", key, "' must be one of ", names_text(t.names), ", got '", s, "'");
  return E(i);
}

// An enum-valued field seen through its name table: get/set the value as an index into names.
struct EnumRef {
  void* p;
  const NameList* names;
  int (*get)(const void* p);
  void (*set)(void* p, int i);
};

template <class E>
EnumRef enum_ref(E* p, const EnumNames<E>& t) {
  return {p, &t.names, [](const void* q) { return int(*static_cast<const E*>(q)); },
          [](void* q, int i) { *static_cast<E*>(q) = E(i); }};
}

// ---- ranges ----

// What a number (or each entry of a list of numbers) or a string may be; {} allows any finite number, any string.
struct Range {
  double lo = -HUGE_VAL, hi = HUGE_VAL;
  bool lo_open = false, hi_open = false;  // > lo (< hi) rather than >= lo (<= hi)
  bool zero_off = false;                  // 0 is allowed too (it switches the feature off)
  const NameList* names = nullptr;        // a string: one of these
};
inline Range above(double lo) { return {.lo = lo, .lo_open = true}; }
inline Range at_least(double lo) { return {.lo = lo}; }
inline Range in_closed(double lo, double hi) { return {.lo = lo, .hi = hi}; }                     // [lo, hi]
inline Range in_half_open(double lo, double hi) { return {.lo = lo, .hi = hi, .hi_open = true}; }  // [lo, hi)
inline Range zero_or_above(double lo) { return {.lo = lo, .lo_open = true, .zero_off = true}; }
inline Range one_of(const NameList& names) { return {.names = &names}; }

// "> 0", ">= 1", "in [0, 1)", "0 (off) or > 1", "one of skip, stop"; "" for {}.
std::string range_text(const Range& r);

// ---- fields ----

// Where a key's value lives: a pointer into a config struct.
using FieldRef = std::variant<int*, int64_t*, double*, bool*, std::string*, std::vector<int>*, EnumRef>;

struct ConfigField {
  std::string key;   // dotted name as in --set and --help-config: "hidden_size", "train.lr", "aah.tau"
  FieldRef ref;
  Range range;       // checked by field_check (validation), not when the value is set
  const char* help;  // one line; the range, the names and the default are printed from the row, not repeated here
};

const ConfigField* field_find(const std::vector<ConfigField>& table, const std::string& key);

// Sets the field from JSON, checking its type: integers in 32-bit (int) or 64-bit (int64) range (integral floats
// accepted), finite numbers, a list of integers (a single integer is a one-entry list), an enum's names. Errors read
// "[config] SOURCE: key 'KEY' must be WHAT, got VALUE".
void field_assign(const ConfigField& f, const nlohmann::json& v, const std::string& source);
// The value as JSON (an enum by its name).
nlohmann::json field_json(const ConfigField& f);
// The JSON value of --set KEY=TEXT: the text itself for string and enum fields, else the text parsed as JSON (a bare
// word that is not JSON stays a string, which field_assign then refuses naming the key).
nlohmann::json field_value_of_text(const ConfigField& f, const std::string& text);
// Checks the range (and that a number is finite); errors read "TAG key 'KEY' must be RANGE, got VALUE".
void field_check(const ConfigField& f, const char* tag);
// What the value may be, for help: range_text of its range, or "one of ..." for an enum; "" when anything goes.
std::string field_range_text(const ConfigField& f);

// A JSON value as shown in an error message: invalid UTF-8 replaced (dump() would throw), long values cut.
std::string json_shown(const nlohmann::json& v);

}  // namespace aah
