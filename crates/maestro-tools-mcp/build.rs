//! Marks the build `no_mcp_filesystem_server` or `no_python_mcp` when the reference MCP servers
//! the tests talk to are not installed, so those tests show as ignored (`bash
//! scripts/prerequisites.sh` installs both).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    maestro_buildcheck::check_mcp_servers();
}
