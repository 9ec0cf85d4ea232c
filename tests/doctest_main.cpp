// The main of every test binary. Several test files share one binary; CTest runs each file on its own
// with --source-file=*/<file>.cpp (tests/CMakeLists.txt). A filter that selects no test case would
// pass with nothing run, so a run (not a --list or --count query) that selected none fails.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

namespace {

bool g_run_ended = false;
unsigned g_selected = 0;

class SelectedCount : public doctest::IReporter {
 public:
  explicit SelectedCount(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    g_run_ended = true;
    g_selected = stats.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

DOCTEST_REGISTER_LISTENER("selected_count", 0, SelectedCount);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  int rc = context.run();
  if (context.shouldExit()) return rc;
  if (g_run_ended && g_selected == 0) {
    std::fprintf(stderr,
                 "%s: no test case matches the filters given (a --source-file pattern names a file "
                 "that is not in this binary?)\n",
                 argc > 0 ? argv[0] : "test");
    return EXIT_FAILURE;
  }
  return rc;
}
