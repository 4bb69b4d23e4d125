// Types of scripts/build-worker-deps.mjs (a plain .mjs, so that wrangler's build command runs it on any Node).
export declare const KEEP: { Redis: string[]; Pipeline: string[] };
export declare function keepMembers(code: string, name: string, keep: string[]): string;
export declare function cutConfigWarnings(code: string): string;
export declare function cutLatencyLogging(code: string): string;
export declare function cutCommandSets(code: string, names: string[]): string;
export declare function cutCredentialsWarning(code: string): string;
export declare function cutUrlCheck(code: string): string;
export declare function cutJsonParseError(code: string): string;
export declare function buildWorkerDeps(outDir: string): string;
export declare function cutHonoMount(code: string): string;
export declare function buildWorkerHono(outDir: string): string;
export declare const LUA_SOURCE: RegExp;
export declare function buildWorkerSource(outDir: string): void;
