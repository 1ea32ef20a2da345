//! Prompt assembly: the system message and first user message the engine sends for a movement.
//! `maestro prompt` prints exactly this, so a piece author sees what the model gets.
