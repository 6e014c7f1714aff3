// Leaf blocks: the heap blocks that hold the tree's leaves (a Leaf and its
// payload), kept on the thread that freed them for the next leaves it makes.
//
// Why not the allocator alone. A session's commit frees thousands of leaves
// at once (10,000 a side in a redaction-heavy session). tcmalloc keeps at
// most 8,192 free blocks of one size on a thread, and far fewer until a
// thread has shown it needs them; every block past that goes back through
// its central lists, which look each one's span up again: about 40 ns a
// block, 12% of such a session's CPU (BENCHMARKS.md). A leaf block freed
// here goes on a list of its size on this thread, and the next leaf of that
// size made on this thread takes it back.
//
// Limits. Blocks of up to kLeafBlockCachedMax bytes are kept, rounded up to
// a multiple of kLeafBlockGrain; larger ones go straight to the heap. A
// thread keeps at most kLeafBlocksCachedBytesMax bytes of free blocks, and
// all threads together at most kLeafBlocksCachedBytesTotalMax (a node runs a
// thread per link: up to 256): a block freed past either goes to the heap. A
// thread claims room under the total kLeafBlocksCreditBytes at a time (one
// atomic add per ~2,700 leaves), gives back what it no longer fills, and
// gives its blocks to the heap and its room back when it ends.
//
// Threads. A block may be freed on any thread, whichever made it: it joins
// that thread's lists (the leaf's last count drop, acquire-release, orders
// every use of it before). Under AddressSanitizer a kept block is poisoned
// until it is taken again, so a use after free is still reported.

#pragma once

#include <cstddef>

namespace once::gossip::internal {

inline constexpr size_t kLeafBlockGrain = 16;                               // bytes
inline constexpr size_t kLeafBlockCachedMax = 512;                          // bytes, one block
inline constexpr size_t kLeafBlocksCachedBytesMax = size_t{4} << 20;        // bytes, a thread
inline constexpr size_t kLeafBlocksCachedBytesTotalMax = size_t{16} << 20;  // bytes, a process
inline constexpr size_t kLeafBlocksCreditBytes = size_t{256} << 10;         // bytes

// A block of at least `bytes` bytes (aligned as operator new aligns).
void* AllocateLeafBlock(size_t bytes);
// Frees a block from AllocateLeafBlock(bytes), the same `bytes`.
void FreeLeafBlock(void* block, size_t bytes);
// The bytes of free blocks this thread keeps, and the room all threads have
// claimed under kLeafBlocksCachedBytesTotalMax (for tests).
size_t LeafBlocksCachedBytes();
size_t LeafBlocksClaimedBytes();

// Gives `block`, of `bytes` bytes from operator new, back to the heap, with
// its size when the compiler passes sizes (it spares the allocator a lookup).
void FreeSized(void* block, size_t bytes);

}  // namespace once::gossip::internal
