// CTest fixture for the MCP tests: fails with the fix when the SDK is not installed.
try {
  require.resolve('@modelcontextprotocol/sdk/package.json', { paths: [__dirname] });
} catch (e) {
  console.error('The MCP TypeScript SDK is not installed: run `npm ci --prefix tests/mcp` (scripts/setup.sh test does).');
  process.exit(1);
}
