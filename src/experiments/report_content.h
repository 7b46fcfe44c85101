// What `aah report` says, before it is written in any format: the tables (cells as text), the prose, the numbers
// of summary.csv and the parts of report.json, and the figures. report_content() builds it from the runs; the
// renderers (report_markdown, report_html, report_csv, report_json) only lay it out.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "experiments/report_read.h"
#include "experiments/stats.h"
#include "experiments/svg.h"

namespace aah::report {

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
// A column of numbers: some cell starts like one ("0.93", "-0.01", "+3"; others may read "not reached"), or none
// reads like text ("off", "[2,2]"): a column of "–" stays aligned with its neighbours.
bool numeric_column(const Table& t, size_t col);
// The table a reader sees: t without the logged-throughput columns (kept in report.json, runs.csv, summary.csv).
Table shown(const Table& t);

// The columns of the two tables: key, header, decimals, source (train or eval).
struct Column {
  const char* key;
  const char* header;
  int decimals;
  bool eval;
};
extern const Column kTrainColumns[6];
extern const Column kEvalColumns[7];
double value_of(const RunData& r, const Column& c);

// Cell text: v with `decimals` decimals, "–" when not finite.
std::string fixed(double v, int decimals);
// "3.0312" for one seed, "3.0312 ± 0.0121" (95% half-width) for more.
std::string cell(const MeanInterval& m, int decimals);
// A paired difference in words: an interval that excludes 0 is a difference, else "no difference detected" with the
// equivalence bound the data support. One seed gives no interval, and no claim.
std::string verdict(const MeanInterval& d, int decimals, const char* unit);

json interval_json(const MeanInterval& m);
// The same, with null numbers when no value was finite (n = 0: e.g. a loss no seed reached).
json interval_json_or_null(const MeanInterval& m);
// A paired difference's interval json `j` with its 90% interval and the equivalence bound (null below two seeds).
json with_equivalence(json j, const MeanInterval& d);

// One row of summary.csv: regime,source,metric,n,mean,lo95,hi95.
struct SummaryRow {
  std::string regime, source, metric;
  int n = 0;
  double mean = 0, lo = 0, hi = 0;
};

// Retrieval accuracy by DEF-ASK distance (synth data): per regime the mean over seeds and the paired difference
// from full per bucket, and the all-or-nothing count of seeds that kept retrieval at the farthest distance.
struct RetrievalSection {
  Table table;                  // accuracy per bucket, mean over seeds
  std::string kept_md;          // kept_sentence per regime
  std::string note;             // what "kept" means and which seeds count
  std::string summary;          // the summary's line per regime but full
  std::vector<SummaryRow> csv;  // summary.csv rows, source "retrieval"
  json regimes = json::array();
};
RetrievalSection retrieval_section(const std::vector<RunData>& runs, const std::vector<std::string>& regimes);

// Far copies on any corpus (eval.json's far_copy, eval/far_copy.h): per distance bucket the loss on tokens a copy
// from that distance predicts, beside frequency-matched novel tokens. Per regime and bucket, paired against full by
// seed: how much the copies' loss rose beyond the control's, (copy - control) - full's (copy - control).
struct FarCopySection {
  Table table;                  // per regime and bucket: copies' loss / control's loss, mean over seeds
  Table delta;                  // per regime but full and bucket: the paired excess, mean ± 95% half-width
  std::string summary;          // the summary's line per regime but full
  std::vector<SummaryRow> csv;  // summary.csv rows, source "far_copy"
  json regimes = json::array();
};
FarCopySection far_copy_section(const std::vector<RunData>& runs, const std::vector<std::string>& regimes);

// The heads that matter (probe.json of a full run): the heads table, its note and the summary's line.
struct HeadsSection {
  Table table;
  json heads = json::array();
  std::string note, summary;
};
HeadsSection heads_section(const SuiteRuns& s);

// Loss by position in the context: a regime's mean over seeds at a bucket start, and its paired Δ vs full.
struct PositionRow {
  std::string regime;
  int start = 0;
  MeanInterval loss, delta;
};

struct Figure {
  std::string file, caption;
};

struct ReportContent {
  // Prose: the setup line, the summary's preamble and list, the notes under sections, the definitions at the end.
  std::string setup, seeds_line, summary_md, timing_note, ttl_md, ttl_note, far_note, definitions;
  // Tables 4 and 6 and the paired differences (with the logged-throughput columns; shown() drops them).
  Table train, eval, paired;
  Table time;     // time side by side (timing.json)
  Table ttl;      // time to loss
  Table buckets;  // window buckets at evaluation
  RetrievalSection retrieval;
  FarCopySection far;
  HeadsSection heads;
  std::vector<int> pos_starts;           // loss by position: the bucket starts
  std::vector<PositionRow> positions;    // per regime, per bucket start
  SvgLineChart by_time, by_work;         // the headline: Δ validation loss against time, against work
  std::vector<SummaryRow> summary_rows;  // summary.csv, in order
  json regimes = json::array(), headline = json::array(), ttl_json = json::array(), window_buckets;
  std::vector<Figure> figures;              // in order
  std::map<std::string, std::string> svgs;  // figure file -> SVG text
};

// The sections' builders, in the order report_content calls them (each appends to c).
void add_regime_tables(const SuiteRuns& s, ReportContent& c);  // training, inference, paired
void add_time_side_by_side(const SuiteRuns& s, ReportContent& c);
void add_time_to_loss(const SuiteRuns& s, ReportContent& c);
void add_loss_by_position(const SuiteRuns& s, ReportContent& c);
void add_figures(const SuiteRuns& s, ReportContent& c);  // and the window-bucket table
// The prose (report_notes.cpp).
std::string setup_text(const SuiteRuns& s);
std::string seeds_text(const SuiteRuns& s);
std::string timing_text(const json& timing);
std::string time_to_loss_text(bool interleaved_time);
std::string far_copy_text();
std::string definitions_text();
// "- **run**: diverged ..." when a run had non-finite steps, else "".
std::string nonfinite_note(const RunData& r);

// Everything the report says about the suite s (its runs' curves in interleaved time when timing.json times every
// regime).
ReportContent report_content(SuiteRuns& s);

}  // namespace aah::report
