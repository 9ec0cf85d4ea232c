// Children in any language: what the kernel executes to start a script child, for the policy
// template ${interpreter} and for an execve error that says which path was not executable.
//
// Runs in the parent (prepare), never in the child: it reads files and allocates.
// Errors: none thrown; a file that cannot be read gives no interpreter and no hint.
#pragma once

#include <string>
#include <vector>

namespace sandbox::detail {

// For a script ("#!" first line), its interpreter resolved to the real path (symlinks followed):
// "#!/usr/bin/python3 -u" gives /usr/bin/python3.11; "#!/usr/bin/env python3" gives the real
// /usr/bin/env and python3 looked up on `path_env` (the child's PATH). An interpreter that is itself
// a script is followed, up to 4 levels as the kernel does. Empty for a binary, or a file that
// cannot be read.
std::vector<std::string> script_interpreters(const std::string& program, const std::string& path_env);

// Why execve of `program` is refused by Landlock's execute rules, naming the path that is not
// executable and how to allow it; "" when every path is covered by `exec_paths` (the substituted
// sandbox.filesystem.execute list).
std::string exec_refusal_hint(const std::string& program, const std::vector<std::string>& interpreters,
                              const std::vector<std::string>& exec_paths, bool policy_names_interpreter);

}  // namespace sandbox::detail
