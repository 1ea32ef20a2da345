// The jobs page.
import { start } from "/ui/lib.js";

start(() => {});
