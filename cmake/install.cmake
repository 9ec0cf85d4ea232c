# `cmake --install BUILD_DIR [--prefix PREFIX]` (DESTDIR works too) installs the three programs, the
# presets and the documentation, and nothing else: no test program, benchmark or fuzzer.
#   PREFIX/bin/subagent-supervisor                                 the command: sandbox, version, --help
#   PREFIX/libexec/subagent-supervisor/subagent-supervisor-core  every other command, exec'd by the above
#   PREFIX/libexec/subagent-supervisor/subagent-child     the supervisor's child, not a command of its own
#   PREFIX/share/subagent-supervisor/policies/           *.json (schema.json included) and README.md
#   PREFIX/share/doc/subagent-supervisor/                README.md, docs/, policies/, protocol/, examples/
# The supervisor finds its core, the child and the presets relative to its own location, so the tree can be
# installed under any prefix and moved afterwards (supervisor/cli/install_layout.cpp).
# tests/install_test.sh installs into a temporary prefix and runs the demo from there.

if(BUILD_SHARED_LIBS)
  # The project's libraries would have to be installed too, with an RPATH; nothing needs that.
  message(FATAL_ERROR "BUILD_SHARED_LIBS is not supported: the programs link the project's libraries statically")
endif()

install(TARGETS subagent-supervisor RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS subagent-supervisor-core subagent-child RUNTIME DESTINATION ${SUBAGENT_INSTALL_CHILD_DIR})

file(GLOB SUBAGENT_POLICY_FILES ${PROJECT_SOURCE_DIR}/policies/*.json)
install(FILES ${SUBAGENT_POLICY_FILES} ${PROJECT_SOURCE_DIR}/policies/README.md
        DESTINATION ${SUBAGENT_INSTALL_POLICY_DIR})

# The same relative layout as the checkout, so the READMEs' links between each other still resolve.
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${SUBAGENT_INSTALL_DOC_DIR})
install(FILES ${PROJECT_SOURCE_DIR}/policies/README.md DESTINATION ${SUBAGENT_INSTALL_DOC_DIR}/policies)
install(FILES ${PROJECT_SOURCE_DIR}/protocol/README.md DESTINATION ${SUBAGENT_INSTALL_DOC_DIR}/protocol)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${SUBAGENT_INSTALL_DOC_DIR}/docs)
# USE_SOURCE_PERMISSIONS: examples/python_child.py is a child program (`run --child .../python_child.py`).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${SUBAGENT_INSTALL_DOC_DIR}/examples USE_SOURCE_PERMISSIONS)
