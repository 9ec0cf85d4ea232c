// Build step: compiles the seccomp program of each preset given on the command line, and the init's,
// with the rules and the libseccomp the supervisor uses at run time, and writes them as a C++ table
// (sandbox/seccomp_programs.hpp says how the table is used).
//   precompile_seccomp OUT.cpp POLICY.json...
// A preset that fails to load or compile fails the build, naming the file.
#include <seccomp.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "policy/preset.hpp"
#include "sandbox/seccomp_programs.hpp"

namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n')
      out += "\\n";
    else if (c == '"' || c == '\\')
      out += std::string("\\") + c;
    else
      out += c;
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: precompile_seccomp OUT.cpp POLICY.json...\n");
    return 2;
  }
  // Ordered by key, and each key once: presets whose rules agree share a program.
  std::map<std::string, std::vector<sock_filter>> programs;
  std::map<std::string, std::string> sources;
  try {
    programs[sandbox::init_seccomp_program_key()] = sandbox::compile_init_seccomp_uncached();
    sources[sandbox::init_seccomp_program_key()] = "the init";
    for (int i = 2; i < argc; ++i) {
      const std::filesystem::path file = argv[i];
      const supervisor::Preset preset = supervisor::load_preset(file.string(), file.parent_path());
      const std::string key = sandbox::seccomp_program_key(preset.sandbox);
      if (programs.count(key)) {
        sources[key] += ", " + preset.name;
        continue;
      }
      programs[key] = sandbox::compile_seccomp_uncached(preset.sandbox);
      sources[key] = "preset " + preset.name;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precompile_seccomp: %s\n", e.what());
    return 1;
  }

  const scmp_version* v = seccomp_version();
  std::ostringstream out;
  out << "// Generated at build time by supervisor/tools/precompile_seccomp.cpp from policies/*.json. Not\n"
         "// edited by hand: the build writes it anew whenever a policy or the compiler changes.\n"
         "#include \"sandbox/seccomp_programs.hpp\"\n\nnamespace {\n";
  int n = 0;
  for (const auto& [key, program] : programs) {
    out << "// " << sources[key] << ": " << program.size() << " instructions\n";
    out << "const sock_filter program_" << n++ << "[] = {\n";
    for (const sock_filter& f : program)
      out << "    {0x" << std::hex << f.code << ", " << std::dec << unsigned{f.jt} << ", " << unsigned{f.jf} << ", 0x"
          << std::hex << f.k << std::dec << "},\n";
    out << "};\n";
  }
  out << "const sandbox::PrecompiledSeccompProgram programs[] = {\n";
  n = 0;
  for (const auto& [key, program] : programs)
    out << "    {" << quoted(key) << ", program_" << n++ << ", " << program.size() << "},\n";
  out << "};\n}  // namespace\n\n"
      << "extern \"C\" const sandbox::PrecompiledSeccompTable subagent_precompiled_seccomp = {" << v->major << ", "
      << v->minor << ", " << v->micro << ", " << programs.size() << ", programs};\n";

  // Written whole or not at all: a half-written table must not be compiled into the program.
  const std::string target = argv[1], temp = target + ".tmp";
  {
    std::ofstream f(temp, std::ios::binary | std::ios::trunc);
    f << out.str();
    if (!f.flush()) {
      std::fprintf(stderr, "precompile_seccomp: cannot write %s\n", temp.c_str());
      return 1;
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, target, ec);
  if (ec) {
    std::fprintf(stderr, "precompile_seccomp: cannot rename %s: %s\n", temp.c_str(), ec.message().c_str());
    return 1;
  }
  return 0;
}
