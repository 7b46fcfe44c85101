// report.html: report.md's content as one self-contained page (figures inline as SVG).
#include "experiments/report_render.h"

namespace aah::report {

namespace {

// Markdown text as HTML text: escaped, `code` spans as <code> (a lone backtick stays as it is).
std::string html_text(const std::string& md) {
  std::string o;
  for (size_t at = 0; at < md.size();) {
    const size_t open = md.find('`', at), close = open == std::string::npos ? open : md.find('`', open + 1);
    if (close == std::string::npos) {
      o += svg_escape(md.substr(at));
      break;
    }
    o +=
        svg_escape(md.substr(at, open - at)) + "<code>" + svg_escape(md.substr(open + 1, close - open - 1)) + "</code>";
    at = close + 1;
  }
  return o;
}

// A paragraph of markdown text (a trailing newline dropped).
std::string html_paragraph(std::string md) {
  while (!md.empty() && md.back() == '\n') md.pop_back();
  return "<p>" + html_text(md) + "</p>\n";
}

// A markdown list ("* item\n" per line) as an HTML <ul>, bold markers dropped.
std::string html_list(const std::string& md) {
  std::string html = "<ul>\n";
  for (size_t at = 0; at < md.size();) {
    const size_t end = md.find('\n', at);
    std::string item = md.substr(at + 2, end - at - 2);
    std::erase(item, '*');
    html += "<li>" + html_text(item) + "</li>\n";
    at = end + 1;
  }
  return html + "</ul>\n";
}

// The report's <head>: a page that reads at a desktop width and on a narrow screen. Tables scroll sideways in their
// box when wider than the page; figures shrink to fit it and sit side by side where there is room (the small
// window maps), each caption as wide as its figure.
std::string html_head() {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n<title>aah suite report</title>\n"
         "<style>\n"
         "body{font-family:\"DejaVu Sans\",Arial,sans-serif;font-size:15px;line-height:1.45;max-width:1200px;"
         "margin:2em auto;padding:0 1em;color:#222}\n"
         "p,ul{max-width:58em}li{margin:0.2em 0}h2{margin-top:1.8em;border-bottom:1px solid "
         "#ddd;padding-bottom:0.2em}\n"
         "code{font-size:0.92em;background:#f2f2f2;padding:0 0.2em;border-radius:3px}\n"
         "div.table{overflow-x:auto;margin:1em 0}table{border-collapse:collapse;font-size:0.93em}\n"
         "th,td{border:1px solid #ccc;padding:4px 7px}th{background:#f2f2f2;vertical-align:bottom}\n"
         "tr:nth-child(even) td{background:#fafafa}td.n{text-align:right;white-space:nowrap;"
         "font-variant-numeric:tabular-nums}td.flag{color:#888}\n"
         "figure{display:inline-table;vertical-align:top;margin:1em 1.5em 1.5em 0}"
         "figure svg{display:block;max-width:100%;height:auto}\n"
         "figcaption{display:table-caption;caption-side:bottom;color:#555;font-size:0.9em;padding-top:0.3em}\n"
         "</style>\n</head>\n<body>\n";
}

// A header cell's text, free to break after an underscore: "deterministic_window window" is no wider than its words.
std::string header_html(const std::string& h) {
  std::string o;
  for (char c : svg_escape(h)) o += c == '_' ? std::string("_<wbr/>") : std::string(1, c);
  return o;
}

// An HTML table in a box that scrolls sideways when the table is wider than the page; numbers right-aligned on one
// line, text columns left-aligned, a timing flagged " !" (stat_cell: not a result) greyed out.
std::string html_table(const Table& t) {
  std::string o = "<div class=\"table\"><table>\n<tr>";
  for (const auto& h : t.header) o += "<th>" + header_html(h) + "</th>";
  o += "</tr>\n";
  std::vector<bool> numeric;
  for (size_t i = 0; i < t.header.size(); i++) numeric.push_back(i > 0 && numeric_column(t, i));
  for (const auto& row : t.rows) {
    o += "<tr>";
    for (size_t i = 0; i < row.size(); i++) {
      std::string cls = i < numeric.size() && numeric[i] ? "n" : "";
      if (row[i].ends_with(" !")) cls += cls.empty() ? "flag" : " flag";
      o += (cls.empty() ? "<td>" : "<td class=\"" + cls + "\">") + svg_escape(row[i]) + "</td>";
    }
    o += "</tr>\n";
  }
  return o + "</table></div>\n";
}

}  // namespace

std::string render_html(const ReportContent& c) {
  const RetrievalSection& retr = c.retrieval;
  const FarCopySection& far = c.far;
  std::string html = html_head() + "<h1>aah suite report</h1>\n" + html_paragraph(c.setup);
  if (!c.summary_md.empty())
    html += "<h2>Summary: what survives</h2>\n" + html_paragraph(c.seeds_line) + html_list(c.summary_md);
  if (!c.time.rows.empty()) html += "<h2>Time side by side</h2>\n" + html_table(c.time) + html_paragraph(c.timing_note);
  html += "<h2>Time to loss</h2>\n" + html_table(c.ttl);
  if (!c.ttl_md.empty()) html += html_list(c.ttl_md);
  html += html_paragraph(c.ttl_note);
  if (!retr.table.rows.empty())
    html += "<h2>Retrieval accuracy by DEF-ASK distance</h2>\n" + html_table(retr.table) + html_list(retr.kept_md) +
            html_paragraph(retr.note);
  if (!far.table.rows.empty())
    html += "<h2>Far copies by distance (real text)</h2>\n" + html_table(far.table) +
            (far.delta.rows.empty() ? "" : html_table(far.delta)) + html_paragraph(c.far_note);
  if (!c.heads.table.rows.empty())
    html += "<h2>Heads that matter, and the windows they got</h2>\n" + html_table(c.heads.table) +
            html_paragraph(c.heads.note);
  html += "<h2>Training (the paper's Table 4)</h2>\n" + html_table(shown(c.train)) +
          "<h2>Inference (the paper's Table 6)</h2>\n" + html_table(shown(c.eval));
  if (!c.paired.rows.empty()) html += "<h2>Paired difference from full attention</h2>\n" + html_table(shown(c.paired));
  html += "<h2>Window buckets at evaluation</h2>\n" + html_table(c.buckets) + "<h2>Figures</h2>\n";
  for (const auto& [file, caption] : c.figures)
    html += "<figure>\n" + c.svgs.at(file) + "<figcaption>" + svg_escape(caption) + "</figcaption>\n</figure>\n";
  html += html_paragraph(c.definitions) + "</body>\n</html>\n";
  return html;
}

}  // namespace aah::report
