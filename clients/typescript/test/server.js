// A real `weft serve` for the tests: the scripted provider, embedded SQLite in a temporary
// directory, an API key, a free port. `WEFT_BIN` names the binary (default: the workspace's
// debug build, which `cargo build -p weft-cli` or `cargo test` makes).
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const API_KEY = "ts-client-key";
const BIN = process.env.WEFT_BIN ?? fileURLToPath(new URL("../../../target/debug/weft", import.meta.url));

export class Server {
  /** Starts `weft serve` with `script` (the scripted provider's conversations). */
  static async start(script, { config = "", dir } = {}) {
    const server = new Server(dir ?? mkdtempSync(join(tmpdir(), "weft-ts-")), script, config);
    await server.spawn("127.0.0.1:0");
    return server;
  }

  constructor(dir, script, config) {
    this.dir = dir;
    writeFileSync(join(dir, "script.json"), JSON.stringify(script));
    writeFileSync(join(dir, "weft.toml"), `[limits]\nturns_per_user = 0\nmessages_per_minute = 0\n${config}`);
  }

  get url() { return `http://${this.addr}`; }
  get workspace() { return join(this.dir, "workspace"); }

  spawn(bind) {
    this.child = spawn(BIN, ["serve", "--bind", bind, "--config", join(this.dir, "weft.toml")], {
      cwd: this.dir,
      env: {
        ...process.env,
        WEFT_SCRIPT: join(this.dir, "script.json"),
        WEFT_DATABASE_URL: `sqlite://${join(this.dir, "weft.db")}`,
        WEFT_WORKSPACE: this.workspace,
        WEFT_API_KEYS: `${API_KEY}:ada`,
        RUST_LOG: process.env.WEFT_TEST_LOG ?? "info",
        NO_COLOR: "1",
      },
      stdio: ["ignore", "pipe", process.env.WEFT_TEST_LOG ? "inherit" : "ignore"],
    });
    return new Promise((resolve, reject) => {
      let seen = "";
      const timer = setTimeout(() => reject(new Error("the server never said `listening on`")), 30000);
      this.child.stdout.on("data", (data) => {
        if (this.addr && seen === null) return;
        seen += data;
        const match = /listening on (\S+)/.exec(seen);
        if (match) {
          clearTimeout(timer);
          this.addr = match[1];
          seen = null;
          resolve();
        }
      });
      this.child.on("exit", (code) => reject(new Error(`weft serve exited (${code}) before listening`)));
    });
  }

  /** `kill -9`, then the same server again on the same address and database. */
  async restartAfterKill() {
    await this.kill();
    await this.spawn(this.addr);
  }

  /** `SIGTERM` (a deploy: sockets closed with 1012, turns finish), then the server again. */
  async restartAfterTerm() {
    await this.kill("SIGTERM");
    await this.spawn(this.addr);
  }

  kill(signal = "SIGKILL") {
    return new Promise((resolve) => {
      if (this.child.exitCode !== null || this.child.signalCode !== null) return resolve();
      this.child.once("exit", () => resolve());
      this.child.kill(signal);
    });
  }

  async stop() {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
