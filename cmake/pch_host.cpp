// Compiled only so that its target builds the precompiled headers the libraries share (cmake/pch.cmake).
namespace subagent_pch_host {}
