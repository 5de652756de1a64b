// Runs the test suite with Node's test runner, turning on the global WebSocket where this Node
// keeps it behind a flag (Node 20).
import { spawnSync } from "node:child_process";

const flags = typeof WebSocket === "function" ? [] : ["--experimental-websocket", "--disable-warning=ExperimentalWarning"];
const run = spawnSync(process.execPath, [...flags, "--test", "test/"], { stdio: "inherit", cwd: new URL("..", import.meta.url) });
process.exit(run.status ?? 1);
