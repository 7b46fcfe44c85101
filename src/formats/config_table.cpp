#include "formats/config_table.h"

#include <type_traits>

#include "core/files.h"

namespace aah {

using json = nlohmann::json;

std::string names_text(const NameList& names) {
  std::string s;
  for (const char* n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

int name_index(const NameList& names, const std::string& s) {
  for (size_t i = 0; i < names.size(); i++)
    if (s == names[i]) return int(i);
  return -1;
}

std::string range_text(const Range& r) {
  if (r.names) return "one of " + names_text(*r.names);
  const bool has_lo = std::isfinite(r.lo), has_hi = std::isfinite(r.hi);
  if (has_lo && has_hi)
    return str_cat("in ", r.lo_open ? "(" : "[", r.lo, ", ", r.hi, r.hi_open ? ")" : "]");
  if (has_lo) return str_cat(r.zero_off ? "0 (off) or " : "", r.lo_open ? "> " : ">= ", r.lo);
  if (has_hi) return str_cat(r.hi_open ? "< " : "<= ", r.hi);
  return "";
}

namespace {

bool in_range(const Range& r, double x) {
  if (r.zero_off && x == 0) return true;
  return (r.lo_open ? x > r.lo : x >= r.lo) && (r.hi_open ? x < r.hi : x <= r.hi);
}

// The integer value of v (an integer, or a float with an integral value) if it fits a signed integer of `bits` (32
// or 64) bits; else bad(what).
template <class Bad>
int64_t integer_of(const json& v, int bits, Bad&& bad) {
  const int64_t hi = bits == 32 ? INT32_MAX : INT64_MAX, lo = -hi - 1;
  const char* what = bits == 32 ? "an integer in 32-bit range" : "an integer in 64-bit range";
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(hi)) bad(what);
    return int64_t(v.get<uint64_t>());
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) bad(what);
    return x;
  }
  if (v.is_number_float()) {
    const double x = v.get<double>();
    // Range-checked as doubles (lo and -lo are powers of two, exact) before converting: converting an
    // out-of-range double to an integer is undefined.
    if (!(std::floor(x) == x && x >= double(lo) && x < -double(lo))) bad(what);
    return int64_t(x);
  }
  bad("an integer");
  return 0;
}

}  // namespace

std::string json_shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

const ConfigField* field_find(const std::vector<ConfigField>& table, const std::string& key) {
  for (const ConfigField& f : table)
    if (f.key == key) return &f;
  return nullptr;
}

void field_assign(const ConfigField& f, const json& v, const std::string& source) {
  auto bad = [&](const std::string& want) {
    fail("[config] ", source, ": key '", f.key, "' must be ", want, ", got ", json_shown(v));
  };
  std::visit(
      [&](auto p) {
        using P = decltype(p);
        if constexpr (std::is_same_v<P, EnumRef>) {
          const int i = v.is_string() ? name_index(*p.names, v.get<std::string>()) : -1;
          if (i < 0) bad("one of " + names_text(*p.names));
          p.set(p.p, i);
        } else {
          using T = std::remove_pointer_t<P>;
          if constexpr (std::is_same_v<T, bool>) {
            if (!v.is_boolean()) bad("true or false");
            *p = v.get<bool>();
          } else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) {
            *p = T(integer_of(v, std::is_same_v<T, int> ? 32 : 64, bad));
          } else if constexpr (std::is_same_v<T, double>) {
            if (!v.is_number()) bad("a number");
            const double x = v.get<double>();
            if (!std::isfinite(x)) bad("a finite number");
            *p = x;
          } else if constexpr (std::is_same_v<T, std::string>) {
            if (!v.is_string()) bad("a string");
            *p = v.get<std::string>();
          } else {  // std::vector<int>
            auto bad_list = [&](const char*) { bad("a list of 32-bit integers"); };
            if (v.is_number()) {
              *p = {int(integer_of(v, 32, bad_list))};
              return;
            }
            if (!v.is_array()) bad_list("");
            std::vector<int> list;
            for (auto& e : v) list.push_back(int(integer_of(e, 32, bad_list)));
            *p = std::move(list);
          }
        }
      },
      f.ref);
}

json field_json(const ConfigField& f) {
  return std::visit(
      [](auto p) -> json {
        if constexpr (std::is_same_v<decltype(p), EnumRef>)
          return (*p.names)[size_t(p.get(p.p))];
        else
          return json(*p);
      },
      f.ref);
}

json field_value_of_text(const ConfigField& f, const std::string& text) {
  if (std::holds_alternative<std::string*>(f.ref) || std::holds_alternative<EnumRef>(f.ref)) return text;
  try {
    return parse_json(text, "--set", "[config]");
  } catch (const Error&) {
    return text;
  }
}

void field_check(const ConfigField& f, const char* tag) {
  const Range& r = f.range;
  auto bad = [&](const std::string& what) {
    fail(tag, " key '", f.key, "' ", what, ", got ", json_shown(field_json(f)));
  };
  std::visit(
      [&](auto p) {
        using P = decltype(p);
        if constexpr (std::is_same_v<P, std::vector<int>*>) {
          for (int e : *p)
            if (!in_range(r, e)) fail(tag, " key '", f.key, "' entries must be ", range_text(r), ", got ", e);
        } else if constexpr (std::is_same_v<P, std::string*>) {
          if (r.names && name_index(*r.names, *p) < 0) bad("must be " + range_text(r));
        } else if constexpr (std::is_same_v<P, int*> || std::is_same_v<P, int64_t*> || std::is_same_v<P, double*>) {
          if (!std::isfinite(double(*p))) bad("must be finite");
          if (!in_range(r, double(*p))) bad("must be " + range_text(r));
        }
      },
      f.ref);
}

std::string field_range_text(const ConfigField& f) {
  if (const EnumRef* e = std::get_if<EnumRef>(&f.ref)) return "one of " + names_text(*e->names);
  return range_text(f.range);
}

}  // namespace aah
