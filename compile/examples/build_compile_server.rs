//! Builds the compile server for the clang found into a directory, with its manifest, as
//! a prebuilt server (`scripts/dist` puts it in the Python wheel's `elfjit/_server/`):
//! `cargo run -p elfjit-compile --example build_compile_server -- OUT_DIR`. Prints its path.

#[cfg(unix)]
fn main() -> std::process::ExitCode {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: build_compile_server OUT_DIR");
        return std::process::ExitCode::from(2);
    };
    match elfjit_compile::build_prebuilt_server(std::path::Path::new(&out)) {
        Ok(path) => {
            println!("{}", path.display());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("build_compile_server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Compile servers are clang processes: the compile side is Unix-only (docs/os-support.md).
#[cfg(not(unix))]
fn main() -> std::process::ExitCode {
    eprintln!("build_compile_server: compile servers are Unix-only");
    std::process::ExitCode::FAILURE
}
