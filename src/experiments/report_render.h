// The report's renderers: one per output format, each laying out a ReportContent (report_content.h).
#pragma once
#include <string>

#include "experiments/report_content.h"

namespace aah::report {

// report.md: the tables, the prose, links to figures/*.svg.
std::string render_markdown(const ReportContent& c);
// A table in Markdown (numbers right-aligned).
std::string markdown_table(const Table& t);
// report.html: the same as report.md, self-contained (figures inline as SVG).
std::string render_html(const ReportContent& c);

// The CSV files: runs.csv (one row per run), summary.csv (one row per regime and number), val_loss_time.csv (every
// evaluation of every run), loss_by_position.csv (written only when some run measured it).
struct CsvFiles {
  std::string runs, summary, val_loss_time, loss_by_position;
};
CsvFiles render_csv(const SuiteRuns& s, const ReportContent& c);

// report.json: all of it, with the per-run series of the figures.
std::string render_json(const SuiteRuns& s, const ReportContent& c);

}  // namespace aah::report
