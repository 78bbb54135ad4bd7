// eval_report_test.cpp — the outputs: results.json round-trips and keeps to its schema (fractions in
// [0, 1], the documented fields), the CSV has one row per residue and folded phase, report sections
// can be appended by other modules, and the combined HTML report (2 models x 2 protocols) is
// self-contained and renders every figure in headless Chromium (Debian `chromium`; the test fails,
// not skips, when it is missing). A report with a broken image is caught by the same check.
#include "eval/eval_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/check.h"
#include "core/io.h"
#include "eval/results.h"
#include "eval/runner.h"
#include "eval_testing.h"
#include "report/html.h"

namespace phasescope {
namespace {

namespace te = testing_eval;
namespace fs = std::filesystem;

using testutil::slurp;

EvalResults synthetic_results(const std::string& model, const std::string& protocol, double depth,
                              uint64_t seed) {
  std::vector<double> profile(24);
  for (int r = 0; r < 24; ++r) profile[r] = r % 8 == 7 ? 0.7 - depth : 0.7;
  std::vector<JournalRecord> j = te::synthetic_journal(profile, 60, seed);
  StatsOptions so;
  so.bootstrap = 200;
  EvalResults r;
  r.stats = stats_compute(j, so);
  r.meta.model = model;
  r.meta.protocol = protocol;
  r.meta.backend = "synthetic journal";
  r.meta.layout = "synthetic";
  r.meta.n_base = 60;
  r.meta.pad = 48;
  r.meta.prompt_len = 194;
  r.meta.query_pos = 193;
  r.meta.tol_mean = 0.5;
  r.meta.tol_sd = 0.75;
  return r;
}

TEST(Results, JsonRoundTripsAndKeepsItsSchema) {
  const EvalResults r = synthetic_results("w8s8-1kv", "prefix", 0.6, 1);
  const nlohmann::json j = results_to_json(r);
  EXPECT_EQ(results_to_json(results_from_json(nlohmann::json::parse(j.dump()), "x")), j);
  // the documented fields (docs/results-schema.md)
  for (const char* k : {"schema",
                        "version",
                        "model",
                        "protocol",
                        "task",
                        "R",
                        "S",
                        "per_residue",
                        "folded",
                        "mean",
                        "mean_ci",
                        "worst",
                        "worst_residue",
                        "worst_ci",
                        "best",
                        "best_ci",
                        "gap",
                        "gap_ci",
                        "period",
                        "p_value",
                        "test",
                        "chi_square",
                        "cochran_q",
                        "layout",
                        "bootstrap",
                        "mean_abs_diff_S",
                        "n_samples",
                        "n_scored",
                        "n_errors",
                        "n_clusters",
                        "design",
                        "journal",
                        "gap_null"})
    EXPECT_TRUE(j.contains(k)) << k;
  ASSERT_EQ(j["per_residue"].size(), 24u);
  auto fraction = [](const nlohmann::json& v) {
    return v.is_number() && v.get<double>() >= 0 && v.get<double>() <= 1;
  };
  for (const auto& row : j["per_residue"]) {
    for (const char* k : {"acc", "ci_low", "ci_high"}) EXPECT_TRUE(fraction(row[k])) << row;
    EXPECT_LE(row["ci_low"].get<double>(), row["acc"].get<double>());
    EXPECT_GE(row["ci_high"].get<double>(), row["acc"].get<double>());
  }
  for (const char* k : {"mean", "worst", "best", "gap", "p_value", "mean_abs_diff_S"})
    EXPECT_TRUE(fraction(j[k])) << k;
  for (const char* k : {"mean_ci", "worst_ci", "best_ci", "gap_ci"})
    EXPECT_TRUE(fraction(j[k][0]) && fraction(j[k][1])) << k;
  for (const char* k : {"pos_mean_range", "pos_sd_range", "tol_mean", "tol_sd", "prompt_len", "query_pos"})
    EXPECT_TRUE(j["layout"].contains(k)) << k;
  // a file of another kind is refused by name
  nlohmann::json bad = j;
  bad["schema"] = "something.else";
  EXPECT_THROW(results_from_json(bad, "x.json"), Error);
  bad = j;
  bad.erase("gap_ci");
  try {
    results_from_json(bad, "x.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gap_ci"), std::string::npos) << e.what();
  }
}

TEST(Results, CsvAndTables) {
  const EvalResults a = synthetic_results("full-1kv", "prefix", 0.0, 2),
                    b = synthetic_results("w8s8-1kv", "prefix", 0.6, 3);
  const std::string csv = results_csv({a, b});
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "model,protocol,kind,index,n,correct,acc,ci_low,ci_high");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 * (24 + 8));
  const std::string table = results_format_table(b);
  EXPECT_NE(table.find("folded mod 8"), std::string::npos);
  EXPECT_NE(table.find("period: 8"), std::string::npos) << table;
  const std::string cmp = results_format_compare({a, b});
  EXPECT_NE(cmp.find("full-1kv"), std::string::npos);
  std::printf("%s", cmp.c_str());
}

TEST(ReportDoc, SectionsAppendAndIdsAreChecked) {
  ReportDoc doc;
  doc.title = "t";
  report_add_section(doc, {"eval-summary", "Summary", "<p>a</p>"});
  report_add_section(doc, {"explain-knockouts", "Explain", "<p>b</p>"});
  EXPECT_THROW(report_add_section(doc, {"eval-summary", "again", ""}), Error);
  EXPECT_THROW(report_add_section(doc, {"bad id", "x", ""}), Error);
  const std::string html = report_render(doc);
  EXPECT_NE(html.find("href=\"#explain-knockouts\""), std::string::npos);
  EXPECT_LT(html.find("<p>a</p>"), html.find("<p>b</p>"));
}

// ---- headless Chromium

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path ? path : "");
    std::string dir;
    while (std::getline(dirs, dir, ':'))
      if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  }
  return "";
}

// Load the page in headless Chromium with a script that counts <img> elements that decoded
// (complete, naturalWidth > 0) and writes "figures-rendered X of Y" into the DOM; return {X, Y}.
std::pair<int, int> chromium_rendered_figures(const std::string& chromium, const std::string& html_path,
                                              const std::string& work) {
  std::string page = slurp(html_path);
  const std::string probe =
      "<script>window.addEventListener('load', function () {"
      " var im = document.images, ok = 0;"
      " for (var i = 0; i < im.length; i++) if (im[i].complete && im[i].naturalWidth > 0) ok++;"
      " var d = document.createElement('div'); d.id = 'ps-figcheck';"
      " d.textContent = 'figures-rendered ' + ok + ' of ' + im.length; document.body.appendChild(d); "
      "});</script>";
  const size_t at = page.rfind("</body>");
  page.insert(at == std::string::npos ? page.size() : at, probe);
  const std::string check = work + "/check.html", dom = work + "/dom.html", err = work + "/chromium.log";
  io_write_atomic(check, page);
  const std::string cmd = "timeout 120 '" + chromium +
                          "' --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
                          "--disable-background-networking --disable-component-update --disable-sync "
                          "--virtual-time-budget=10000 --user-data-dir='" +
                          work + "/profile' --dump-dom 'file://" + check + "' > '" + dom + "' 2> '" + err +
                          "'";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(status, 0) << "chromium failed; see " << err << ":\n" << slurp(err).substr(0, 2000);
  std::smatch m;
  const std::string out = slurp(dom);
  static const std::regex marker("id=\"ps-figcheck\">figures-rendered (\\d+) of (\\d+)<");
  if (!std::regex_search(out, m, marker)) {
    ADD_FAILURE() << "the page did not run its check (no marker in the DOM); chromium said:\n"
                  << slurp(err).substr(0, 2000);
    return {-1, -1};
  }
  return {std::stoi(m[1]), std::stoi(m[2])};
}

TEST(Report, CombinedReportIsSelfContainedAndRendersItsFiguresInChromium) {
  const std::string dir = testutil::tmp_dir("report");
  // 2 models x 2 protocols, written as results.json files, combined as `reproduce` does
  std::vector<std::string> paths;
  int k = 0;
  for (const char* protocol : {"prefix", "in-sequence"})
    for (const auto& [model, depth] :
         std::vector<std::pair<std::string, double>>{{"full-1kv", 0.0}, {"w8s8-1kv", 0.6}}) {
      const std::string sub = dir + "/run" + std::to_string(k++);
      io_make_dirs(sub);
      results_write_json(synthetic_results(model, protocol, depth, 10 + k), sub + "/results.json");
      paths.push_back(sub + "/results.json");
    }
  const std::vector<EvalResults> runs =
      eval_combined_report(paths, dir + "/combined", "phasescope reproduce (test)");
  ASSERT_EQ(runs.size(), 4u);
  const std::string html = slurp(dir + "/combined/report.html");
  for (const char* f :
       {"results.csv", "compare.txt", "eval_prefix_per_residue.png", "eval_in-sequence_folded.png"})
    EXPECT_TRUE(fs::exists(dir + "/combined/" + f)) << f;
  // self-contained: 4 figures embedded as data URIs, nothing fetched from anywhere
  size_t imgs = 0;
  for (size_t p = html.find("<img"); p != std::string::npos; p = html.find("<img", p + 1)) ++imgs;
  EXPECT_EQ(imgs, 4u);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("src=\"file"), std::string::npos);
  EXPECT_NE(html.find("w8s8-1kv"), std::string::npos);

  const std::string chromium = find_chromium();
  ASSERT_FALSE(chromium.empty()) << "chromium is not installed, so the HTML report cannot be checked: run "
                                    "scripts/setup.sh (it installs the Debian package chromium)";
  const auto [rendered, total] = chromium_rendered_figures(chromium, dir + "/combined/report.html", dir);
  std::printf("  chromium: figures-rendered %d of %d\n", rendered, total);
  EXPECT_EQ(total, 4);
  EXPECT_EQ(rendered, 4);

  // the same check catches a figure that does not decode
  std::string broken = html;
  const size_t data = broken.find("base64,");
  ASSERT_NE(data, std::string::npos);
  broken.replace(data + 7, 40, std::string(40, 'A'));
  io_write_atomic(dir + "/broken.html", broken);
  const auto [ok_broken, total_broken] = chromium_rendered_figures(chromium, dir + "/broken.html", dir);
  EXPECT_EQ(total_broken, 4);
  EXPECT_EQ(ok_broken, 3);
  fs::remove_all(dir);
}

TEST(Report, SingleRunReportFromRunEval) {
  te::RuleBackend phase = te::phase_backend();
  EvalOptions o;
  o.layout.n_base = 24;
  o.model = "fake";
  o.bootstrap = 100;
  const std::string dir = testutil::tmp_dir("single");
  run_eval(phase, o, dir);
  const std::string html = slurp(dir + "/report.html");
  size_t imgs = 0;
  for (size_t p = html.find("<img"); p != std::string::npos; p = html.find("<img", p + 1)) ++imgs;
  EXPECT_EQ(imgs, 2u);
  EXPECT_NE(html.find("Run: fake · prefix"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace phasescope
