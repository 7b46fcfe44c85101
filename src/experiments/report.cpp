#include "experiments/report.h"

#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/files.h"
#include "experiments/report_content.h"
#include "experiments/report_read.h"
#include "experiments/report_render.h"

namespace aah {

using report::json;

bool report_owns_file(const std::string& existing, const std::string& now) {
  auto first_line = [](const std::string& t) { return t.substr(0, t.find('\n')); };
  if (now.rfind("# aah suite report\n", 0) == 0) return existing.rfind("# aah suite report\n", 0) == 0;
  if (now.rfind("<!DOCTYPE html>", 0) == 0)
    return existing.substr(0, 400).find("<title>aah suite report</title>") != std::string::npos;
  if (now.rfind("{", 0) == 0) {  // report.json: an object with the suite and its runs
    const json j = json::parse(existing, nullptr, false);
    return j.is_object() && j.contains("suite") && j.contains("runs") && j.contains("regimes");
  }
  // A CSV: the header's first two columns (a later aah may add columns to the same file)
  auto lead = [&](const std::string& t) {
    const std::string h = first_line(t);
    const size_t comma = h.find(',');
    return comma == std::string::npos ? h : h.substr(0, h.find(',', comma + 1));
  };
  return lead(existing) == lead(now);
}

void report_write(const std::string& dir) {
  report::SuiteRuns suite = report::read_suite(dir);
  const report::ReportContent c = report::report_content(suite);
  const std::string md = report::render_markdown(c), html = report::render_html(c);
  const report::CsvFiles csv = report::render_csv(suite, c);
  const std::string json_text = report::render_json(suite, c);
  make_dirs(dir + "/figures");
  for (const auto& [file, caption] : c.figures) write_file_atomic(dir + "/figures/" + file, c.svgs.at(file));
  // Replace only what an earlier report wrote: each file, if there, must look like this one (report_owns_file).
  std::vector<std::pair<std::string, const std::string*>> files = {{"report.md", &md},
                                                                   {"report.html", &html},
                                                                   {"runs.csv", &csv.runs},
                                                                   {"summary.csv", &csv.summary},
                                                                   {"val_loss_time.csv", &csv.val_loss_time},
                                                                   {"report.json", &json_text}};
  if (!c.pos_starts.empty()) files.push_back({"loss_by_position.csv", &csv.loss_by_position});
  for (const auto& [name, text] : files)
    if (file_exists(dir + "/" + name) && !report_owns_file(read_file(dir + "/" + name), *text))
      fail("[report] ", dir, "/", name, " was not written by aah report and would be replaced: move it, or write the ",
           "suite elsewhere");
  for (const auto& [name, text] : files) write_file_atomic(dir + "/" + name, *text);
  std::printf("%s\n", md.substr(0, md.find("\n## Window buckets")).c_str());
  std::fflush(stdout);  // the tables before the message below, also when both go to one file
  std::fprintf(stderr,
               "[report] wrote %s/report.md, report.html, runs.csv, summary.csv, val_loss_time.csv, report.json, "
               "figures/ (%zu)\n",
               dir.c_str(), c.figures.size());
}

}  // namespace aah
