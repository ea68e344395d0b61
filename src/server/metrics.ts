import { monitorEventLoopDelay, type IntervalHistogram } from "node:perf_hooks";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { PagePool } from "../engine/paged-cache.js";
import type { Scheduler } from "../engine/scheduler.js";

/** The server's Prometheus metrics, on a registry of its own (several servers may share a process). */
export class ServerMetrics {
  readonly registry = new Registry();
  readonly requests: Counter<"endpoint" | "status">;
  /** streams whose clients were dropped: `buffer` (too many bytes unread), `stall` (read nothing for too long) */
  readonly streamsDropped: Counter<"reason">;
  readonly promptTokens: Counter;
  readonly generationTokens: Counter;
  readonly ttft: Histogram;
  readonly itl: Histogram;
  readonly stepTokens: Histogram;
  readonly stepSeconds: Histogram;
  /** event-loop delays, sampled every 10 ms (a forward step, a flood of I/O: whatever keeps requests waiting) */
  readonly loopDelay: IntervalHistogram = monitorEventLoopDelay({ resolution: 10 });

  constructor(scheduler: Scheduler, pool: PagePool) {
    const registers = [this.registry];
    this.requests = new Counter({
      name: "latent_requests_total",
      help: "HTTP requests answered, by endpoint and status",
      labelNames: ["endpoint", "status"],
      registers,
    });
    this.streamsDropped = new Counter({
      name: "latent_streams_dropped_total",
      help: "streams whose client was dropped: it left too many bytes unread (buffer) or read nothing for too long (stall)",
      labelNames: ["reason"],
      registers,
    });
    this.promptTokens = new Counter({
      name: "latent_prompt_tokens_total",
      help: "prompt tokens of accepted generation requests",
      registers,
    });
    this.generationTokens = new Counter({
      name: "latent_generation_tokens_total",
      help: "tokens generated",
      registers,
    });
    new Gauge({
      name: "latent_queue_depth",
      help: "sequences waiting for a batch slot",
      registers,
      collect() {
        this.set(scheduler.stats().waiting);
      },
    });
    new Gauge({
      name: "latent_running_sequences",
      help: "sequences in the running batch",
      registers,
      collect() {
        this.set(scheduler.stats().running);
      },
    });
    new Gauge({
      name: "latent_held_sequences",
      help: "sequences held (paused, pages kept) because their stream's client is not reading",
      registers,
      collect() {
        this.set(scheduler.stats().held);
      },
    });
    new Gauge({
      name: "latent_kv_pages_in_use",
      help: "KV cache pages held by sequences",
      registers,
      collect() {
        this.set(pool.stats().pagesInUse);
      },
    });
    new Gauge({
      name: "latent_kv_pages_cached",
      help: "unreferenced KV pages kept for prefix caching (evictable)",
      registers,
      collect() {
        this.set(pool.stats().pagesCached);
      },
    });
    new Gauge({
      name: "latent_kv_pages_total",
      help: "KV cache pages in the pool",
      registers,
      collect() {
        this.set(pool.stats().totalPages);
      },
    });
    new Gauge({
      name: "latent_kv_page_size",
      help: "positions per KV page",
      registers,
      collect() {
        this.set(pool.pageSize);
      },
    });
    const cumulative = (name: string, help: string, read: () => number): void => {
      let last = 0;
      new Counter({
        name,
        help,
        registers,
        collect() {
          const now = read();
          if (now > last) this.inc(now - last);
          last = now;
        },
      });
    };
    cumulative(
      "latent_prefix_cache_hits_total",
      "full prompt pages taken from the prefix cache",
      () => pool.stats().prefixHits,
    );
    cumulative(
      "latent_prefix_cache_queries_total",
      "full prompt pages looked up in the prefix cache",
      () => pool.stats().prefixQueries,
    );
    cumulative("latent_kv_evictions_total", "cached KV pages evicted", () => pool.stats().evictions);
    cumulative(
      "latent_preemptions_total",
      "sequences preempted (pages given back, recomputed later)",
      () => scheduler.stats().preemptions,
    );
    cumulative("latent_steps_total", "forward passes of the scheduler", () => scheduler.stats().steps);
    this.loopDelay.enable();
    const loop = this.loopDelay;
    new Gauge({
      name: "latent_event_loop_delay_max_seconds",
      help: "longest event-loop delay since the previous scrape (how long a request could wait to be read)",
      registers,
      collect() {
        this.set(loop.count > 0 ? loop.max / 1e9 : 0);
        loop.reset();
      },
    });
    const latency = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
    this.ttft = new Histogram({
      name: "latent_time_to_first_token_seconds",
      help: "time from request to first generated token",
      buckets: latency,
      registers,
    });
    this.itl = new Histogram({
      name: "latent_inter_token_latency_seconds",
      help: "time between consecutive generated tokens of a sequence",
      buckets: latency,
      registers,
    });
    this.stepTokens = new Histogram({
      name: "latent_batch_tokens",
      help: "tokens per forward pass",
      buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
      registers,
    });
    this.stepSeconds = new Histogram({
      name: "latent_step_seconds",
      help: "wall time of a forward pass",
      buckets: latency,
      registers,
    });
  }
}
