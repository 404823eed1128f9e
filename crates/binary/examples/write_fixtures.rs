//! Writes the hand-laid-out ELF test fixture (with and without section
//! headers) into a directory, for fuzzing seeds and for looking at with
//! readelf: `cargo run -p coldstart-binary --example write_fixtures -- DIR`.

#[path = "../tests/common/fixture.rs"]
mod fixture;

fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| ".".into());
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("fixture.so"), fixture::build(true))?;
    std::fs::write(dir.join("fixture-no-sections.so"), fixture::build(false))?;
    Ok(())
}
