// A MongoDB Collection stand-in whose query, update-pipeline and aggregation semantics all come from
// mingo, an independent MQL engine. The store passes it exactly what it would pass to the driver; this
// class only does the bookkeeping mingo has no notion of (upsert seeding, returnDocument, projection).
import { aggregate, find, updateOne } from 'mingo';
import type { MongoCollectionLike } from '../../src/stores/mongodb.js';

type Doc = Record<string, unknown> & { _id: string };

export interface RecordedCall {
  method: string;
  args: unknown[];
}

export class MingoCollection implements MongoCollectionLike {
  readonly docs: Doc[] = [];
  readonly calls: RecordedCall[] = [];
  readonly indexes: { spec: Record<string, number>; options: object }[] = [];
  /** Set to make every call fail or hang, to simulate an outage. */
  fault: 'none' | 'error' | 'hang' = 'none';

  private async gate(): Promise<void> {
    if (this.fault === 'error') throw new Error('connection refused (simulated)');
    if (this.fault === 'hang') await new Promise(() => {});
  }

  private match(filter: object): Doc | undefined {
    return find(this.docs, filter as never).next() as Doc | undefined;
  }

  /** As the driver's findOne: a copy of the document, or null. */
  async findOne(filter: { _id: string }): Promise<Doc | null> {
    this.calls.push({ method: 'findOne', args: [structuredClone(filter)] });
    await this.gate();
    const d = this.match(filter);
    return d ? structuredClone(d) : null;
  }

  /** As the driver's insertOne (a duplicate _id is error 11000). */
  async insertOne(doc: Doc): Promise<unknown> {
    this.calls.push({ method: 'insertOne', args: [structuredClone(doc)] });
    await this.gate();
    if (this.match({ _id: doc._id })) throw Object.assign(new Error('E11000 duplicate key error'), { code: 11000 });
    this.docs.push(structuredClone(doc));
    return { insertedId: doc._id };
  }

  async findOneAndUpdate(filter: { _id: string }, update: object[], options: Record<string, unknown>): Promise<unknown> {
    this.calls.push({ method: 'findOneAndUpdate', args: [structuredClone(filter), structuredClone(update), structuredClone(options)] });
    await this.gate();
    if (!Array.isArray(update)) throw new Error('expected an update pipeline');
    if (!this.match(filter)) {
      if (!options.upsert) return null;
      // An upsert seeds the new document from the filter's equality on _id, as MongoDB does.
      const id = (filter as { _id: unknown })._id;
      if (typeof id !== 'string') throw new Error('upsert needs an _id equality');
      this.docs.push({ _id: id });
    }
    const result = updateOne(this.docs, filter as never, update as never);
    if (result.matchedCount !== 1) throw new Error(`matched ${result.matchedCount}`);
    const after = this.match(filter)!;
    const projection = options.projection as Record<string, 0 | 1> | undefined;
    if (!projection) return structuredClone(after);
    return find([after], {}, projection as never).next();
  }

  aggregate(pipeline: object[], options?: object) {
    this.calls.push({ method: 'aggregate', args: [structuredClone(pipeline), options] });
    return {
      toArray: async () => {
        await this.gate();
        return aggregate(this.docs, pipeline as never[]);
      },
    };
  }

  async deleteOne(filter: { _id: string }): Promise<unknown> {
    this.calls.push({ method: 'deleteOne', args: [filter] });
    await this.gate();
    const d = this.match(filter);
    if (d) this.docs.splice(this.docs.indexOf(d), 1);
    return { deletedCount: d ? 1 : 0 };
  }

  async createIndex(spec: Record<string, 1 | -1>, options: object): Promise<unknown> {
    this.calls.push({ method: 'createIndex', args: [spec, options] });
    await this.gate();
    this.indexes.push({ spec, options });
    return 'expiresAt_ttl';
  }
}
