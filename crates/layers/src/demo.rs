//! placeholder
use crate::Result;
pub fn run_layers_demo(out: &mut dyn std::io::Write) -> Result<()> {
    let _ = writeln!(out, "todo");
    Ok(())
}
