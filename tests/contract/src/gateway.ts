// gateway.ts: runs the real sbx-gateway for a test: a free loopback port, a temporary data dir,
// a known admin token; waits until /healthz answers and stops it with SIGTERM afterwards.
// Under tests/pg-run.sh (SBX_TEST_PG_ADMIN_URL set) each gateway gets a fresh PostgreSQL database
// of its own as its store; otherwise the SQLite file in its data dir.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";

export interface RunningGateway {
  baseUrl: string;
  adminToken: string;
  dataDir: string;
  /** The store setting the gateway runs with: "sqlite" or a postgres:// URL (for workers too). */
  store: string;
  process: ChildProcess;
  /** Everything the gateway wrote to stdout and stderr so far (for failure messages). */
  output(): string;
  /** SIGTERM, then waits for the exit; returns the exit code (null when killed by a signal). */
  stop(): Promise<number | null>;
}

/** Whether the tests run on PostgreSQL (tests/pg-run.sh started a server for them). */
export const onPostgres = Boolean(process.env["SBX_TEST_PG_ADMIN_URL"]);

/** A fresh PostgreSQL database owned by the fixture's sbx role, reached over its unix socket. */
function freshDatabase(): string {
  const env = process.env;
  const name = `sbx_ct_${randomBytes(6).toString("hex")}`;
  const admin = `postgres:///postgres?host=${env["SBX_TEST_PG_SOCKET_DIR"]}&port=${env["SBX_TEST_PG_PORT"]}&user=postgres`;
  execFileSync("psql", ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", admin, "-c", `CREATE DATABASE ${name} OWNER sbx`]);
  return `postgres:///${name}?host=${env["SBX_TEST_PG_SOCKET_DIR"]}&port=${env["SBX_TEST_PG_PORT"]}&user=sbx`;
}

/** Runs one SQL statement on the gateway's store, as a worker or an operator would. */
export function storeSql(gw: RunningGateway, statement: string): string {
  if (gw.store !== "sqlite")
    return execFileSync("psql", ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", gw.store, "-c", statement], { encoding: "utf8" }).trim();
  return execFileSync("sqlite3", ["-cmd", ".timeout 10000", join(gw.dataDir, "sbx.db"), statement], { encoding: "utf8" }).trim();
}

/** Asks the kernel for a free loopback port (bind to port 0, read it, close). */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

async function waitHealthy(baseUrl: string, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let lastError = "";
  while (performance.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`sbx-gateway exited early (code ${child.exitCode}, signal ${child.signalCode})`);
    }
    try {
      const response = await fetch(`${baseUrl}/healthz`);
      await response.arrayBuffer();
      if (response.status === 200) return;
      lastError = `status ${response.status}`;
    } catch (err) {
      lastError = String(err);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`sbx-gateway did not become healthy in ${timeoutMs} ms: ${lastError}`);
}

/**
 * Starts the gateway binary with extra environment settings (SBX_*), optionally through a
 * wrapper command. The data dir is removed by stop(). Retries on another port when the chosen
 * one was taken in between.
 */
export async function startGateway(
  binary: string,
  env: Record<string, string> = {},
  wrapper: string[] = [],
): Promise<RunningGateway> {
  const adminToken = `sbx_admin_${randomBytes(32).toString("base64url")}`;
  const store = onPostgres ? freshDatabase() : "sqlite";
  for (let attempt = 0; ; attempt++) {
    const dataDir = mkdtempSync(join(tmpdir(), "sbx-contract-"));
    const port = await freePort();
    // With a certificate (SBX_TLS_CERT_FILE) the gateway serves HTTPS; the process must trust its
    // CA (NODE_EXTRA_CA_CERTS) for fetch to reach it.
    const baseUrl = `${env["SBX_TLS_CERT_FILE"] ? "https" : "http"}://127.0.0.1:${port}`;
    let output = "";
    // A wrapper (e.g. unshare + mount) runs first and is handed the gateway binary last.
    const [command, ...args] = wrapper.length > 0 ? [...wrapper, binary] : [binary];
    const child = spawn(command!, args, {
      env: {
        ...process.env,
        SBX_DATA_DIR: dataDir,
        SBX_LISTEN: `127.0.0.1:${port}`,
        SBX_ADMIN_TOKEN: adminToken,
        SBX_STORE: store,
        ...env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    const stop = async (): Promise<number | null> => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 15000);
      const code = await exited;
      clearTimeout(timer);
      rmSync(dataDir, { recursive: true, force: true });
      return code;
    };
    try {
      await waitHealthy(baseUrl, child, 30000);
      return { baseUrl, adminToken, dataDir, store, process: child, output: () => output, stop };
    } catch (err) {
      await stop();
      if (attempt < 2 && /address already in use|EADDRINUSE/i.test(output)) continue;
      throw new Error(`${String(err)}\n--- gateway output ---\n${output}`);
    }
  }
}
