// The job page.
import { start } from "/ui/lib.js";

start(() => {});
