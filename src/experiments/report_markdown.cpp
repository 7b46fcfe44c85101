// report.md.
#include "core/check.h"
#include "experiments/report_render.h"

namespace aah::report {

std::string markdown_table(const Table& t) {
  std::string o = "|";
  for (const auto& h : t.header) o += " " + h + " |";
  o += "\n|";
  for (size_t i = 0; i < t.header.size(); i++) o += i && numeric_column(t, i) ? "---:|" : "---|";
  o += "\n";
  for (const auto& row : t.rows) {
    o += "|";
    for (const auto& c : row) o += " " + c + " |";
    o += "\n";
  }
  return o;
}

std::string render_markdown(const ReportContent& c) {
  const auto& markdown = markdown_table;
  const RetrievalSection& retr = c.retrieval;
  const FarCopySection& far = c.far;
  std::string md = "# aah suite report\n\n" + c.setup + "\n\n";
  if (!c.summary_md.empty()) md += "## Summary: what survives\n\n" + c.seeds_line + "\n\n" + c.summary_md + "\n";
  if (!c.time.rows.empty()) md += "## Time side by side\n\n" + markdown(c.time) + "\n" + c.timing_note + "\n";
  md +=
      "## Time to loss\n\n" + markdown(c.ttl) + "\n" + (c.ttl_md.empty() ? "" : c.ttl_md + "\n") + c.ttl_note + "\n\n";
  if (!retr.table.rows.empty())
    md += "## Retrieval accuracy by DEF-ASK distance\n\n" + markdown(retr.table) + "\n" + retr.kept_md + "\n" +
          retr.note + "\n\n";
  if (!far.table.rows.empty())
    md += "## Far copies by distance (real text)\n\n" + markdown(far.table) + "\n" +
          (far.delta.rows.empty() ? "" : markdown(far.delta) + "\n") + c.far_note + "\n\n";
  if (!c.heads.table.rows.empty())
    md += "## Heads that matter, and the windows they got\n\n" + markdown(c.heads.table) + "\n" + c.heads.note + "\n\n";
  md += "## Training (the paper's Table 4)\n\n" + markdown(shown(c.train)) +
        "\n## Inference (the paper's Table 6)\n\n" + markdown(shown(c.eval));
  if (!c.paired.rows.empty()) md += "\n## Paired difference from full attention\n\n" + markdown(shown(c.paired));
  md += "\n## Window buckets at evaluation\n\n" + markdown(c.buckets) + "\n## Figures\n\n";
  for (const auto& [file, caption] : c.figures) md += str_cat("![", caption, "](figures/", file, ")\n\n");
  md += c.definitions + "\n";
  return md;
}

}  // namespace aah::report
