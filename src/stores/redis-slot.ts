// Redis Cluster's key slot: CRC16 (XMODEM) of the key, or of its {hash tag}, mod 16384. A script's keys
// must share one slot, so batches on a cluster are grouped by it.
const encoder = new TextEncoder();

export function keySlot(key: string): number {
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of encoder.encode(key)) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}
