// The exact reference model every store is checked against: a continuous token bucket in BigInt units.

/** A continuous token bucket in exact integer units: one token = 1000*q units, p units refill per ms. */
export class ExactBucket {
  units: bigint;
  last = 0n;
  constructor(
    readonly capacity: number,
    readonly p: bigint,
    readonly q: bigint,
  ) {
    this.units = BigInt(capacity) * 1000n * q;
  }
  private advance(t: bigint) {
    const cap = BigInt(this.capacity) * 1000n * this.q;
    this.units += (t - this.last) * this.p;
    if (this.units > cap) this.units = cap;
    this.last = t;
  }
  take(t: number, cost: number, maxWaitMs: number) {
    this.advance(BigInt(t));
    const costU = BigInt(cost) * 1000n * this.q;
    const ceilDiv = (a: bigint, b: bigint) => (a <= 0n ? 0n : (a + b - 1n) / b);
    if (this.units + BigInt(maxWaitMs) * this.p >= costU) {
      this.units -= costU;
      const remaining = this.units > 0n ? this.units / (1000n * this.q) : 0n;
      return { allowed: true, remaining: Number(remaining), waitMs: Number(ceilDiv(-this.units, this.p)), retryAfterMs: 0 };
    }
    const remaining = this.units > 0n ? this.units / (1000n * this.q) : 0n;
    return { allowed: false, remaining: Number(remaining), waitMs: 0, retryAfterMs: Number(ceilDiv(costU - this.units, this.p)) };
  }
}
