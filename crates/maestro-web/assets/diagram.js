// The diagram page (built in the next change).
import { start } from "/ui/lib.js";

start(() => {});
