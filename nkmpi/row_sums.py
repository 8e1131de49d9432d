"""Loops over rows held in vector registers (numba intrinsics that emit LLVM's vector
operations; no MPI).

numba leaves LLVM's SLP vectorizer off, and its loop vectorizer works in steps of 32
numbers, so six hot loops ran scalar or went through memory:

* the center update adds each agent's neighbours' K x p centers (for a sensor network
  about 28 rows of 64 numbers an agent, the bulk of an iteration) and, at a monitoring
  point, their squared gaps to the agent's own: a loop over the columns for each row
  loads and stores the running sums every row.  `add_row_vectors` and
  `add_squared_gaps` keep up to VECTORS vectors of LANES columns in registers while
  every row is added, and `add_rows_and_gaps` does both with each row loaded once;
* the exact kernel's distances of a tile of rows to an agent's centers, feature by
  feature: an agent of 16 rows is shorter than the loop vectorizer's step.
  `tile_center_distances` works in whole vectors of rows, several centers at once, on
  rows that `transpose_rows` turns into columns eight by eight in registers;
* the new centers, a stream larger than the caches: `store_row` writes them without
  first reading them into the cache;
* the rows an update will need a few agents on and the caches no longer hold: the
  hardware sees no pattern in them, so `prefetch_rows` and `prefetch_span` ask for their
  lines while the rows at hand are summed; so are the rows of the few agents a settled
  pass opens;
* the search of a row's best and second-best center: a chain of K comparisons a row.
  The screening's `rank_row` ranks eight centers a vector, then merges the lanes; the
  exact pass's `rank_columns` ranks eight rows a vector, each lane a row, and
  `rank_bound_columns` goes on to the rows' bounds, two divisions and two square roots a
  row that ran scalar; `add_weighted_row` adds a row to its cluster's sum in vectors;
* how far each center moved in an update (for the local pass's bounds): a center's p
  squared differences summed one by one.  `add_moves` sums them in lanes, then eight
  centers' lanes at once.

Each number gets the same operations, in the same order, as in the scalar loops: the
lanes of a vector operation are independent IEEE operations, and with no fastmath flag
LLVM neither reassociates them nor fuses a multiply into an add.  So the results are
bit for bit those of the serial reference.  (The rankings only compare numbers: which is
smallest, and at which index, does not depend on the order they are compared in.  The
moves are bounds, not results: their rounding is bounded for any order of the sums.)
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

#: float64 numbers in one vector (a 512-bit register; LLVM splits it on narrower ones).
LANES = 8
#: Vectors held at once: a tile of up to VECTORS * LANES columns per pass over the rows.
VECTORS = 8


def _is_float64_array(ty, ndim):
    return isinstance(ty, types.Array) and ty.dtype == types.float64 and ty.ndim == ndim and ty.layout == "C"


def _as_i64(builder, value, ty):
    """An integer argument of numba type `ty` as a 64-bit value."""
    if value.type.width == 64:
        return value
    return builder.sext(value, ir.IntType(64)) if ty.signed else builder.zext(value, ir.IntType(64))


def _in_passes(builder, n_vectors, name, emit):
    """emit(count, first_vector) for the vectors first_vector..first_vector+count-1, in
    passes of up to VECTORS over 0..n_vectors-1.  Each count gets a loop of its own, in a
    block of its own, so that the vectors a pass holds are values LLVM keeps in registers
    (its mem2reg promotes the caller's slots), not memory indexed at run time."""
    i64 = ir.IntType(64)
    most = ir.Constant(i64, VECTORS)
    with cgutils.for_range_slice(builder, ir.Constant(i64, 0), n_vectors, most, inc=True) as (first_vector, _):
        left = builder.sub(n_vectors, first_vector)
        done = builder.append_basic_block(f"{name}.done")
        switch = builder.switch(builder.select(builder.icmp_unsigned("<", left, most), left, most), done)
        for count in range(1, VECTORS + 1):
            case = builder.append_basic_block(f"{name}.{count}")
            switch.add_case(ir.Constant(i64, count), case)
            builder.position_at_end(case)
            emit(count, first_vector)
            builder.branch(done)
        builder.position_at_end(done)


def _row_loop(adds, gaps):
    """The codegen of add_row_vectors (adds: each row is added to `total`), of
    add_squared_gaps (gaps: each row's squared difference from the anchor row is added to
    `total`) and of add_rows_and_gaps (both: every row added to `total`, and from entry
    `first_gap` on its squared gap added to `gaps`, with the row loaded once)."""

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        vector = ir.VectorType(ir.DoubleType(), LANES)
        vector_ptr = vector.as_pointer()
        if adds and gaps:
            total_arg, gaps_arg, rows_arg, index_arg, first_arg, gap_arg, stop_arg, anchor_arg = args
            total_ty, gaps_ty, rows_ty, index_ty, first_ty, gap_ty, stop_ty, anchor_ty = sig.args
        else:
            total_arg, rows_arg, index_arg, first_arg, stop_arg = args[:5]
            total_ty, rows_ty, index_ty, first_ty, stop_ty = sig.args[:5]
            gaps_arg, gaps_ty = (total_arg, total_ty) if gaps else (None, None)
            gap_arg, gap_ty = (first_arg, first_ty) if gaps else (stop_arg, stop_ty)
            anchor_arg, anchor_ty = (args[5], sig.args[5]) if gaps else (None, None)
        rows_array = context.make_array(rows_ty)(context, builder, rows_arg)
        index_array = context.make_array(index_ty)(context, builder, index_arg)
        first, stop = _as_i64(builder, first_arg, first_ty), _as_i64(builder, stop_arg, stop_ty)
        first_gap = _as_i64(builder, gap_arg, gap_ty)
        n_vectors = builder.udiv(builder.extract_value(rows_array.shape, 1), ir.Constant(i64, LANES))
        row_bytes = builder.extract_value(rows_array.strides, 0)
        rows_start = builder.ptrtoint(rows_array.data, i64)
        total_start = builder.ptrtoint(context.make_array(total_ty)(context, builder, total_arg).data, i64)
        if gaps:
            gaps_start = builder.ptrtoint(context.make_array(gaps_ty)(context, builder, gaps_arg).data, i64)
            anchor_start = builder.add(rows_start, builder.mul(_as_i64(builder, anchor_arg, anchor_ty), row_bytes))

        def rows_added(count, first_vector):
            def vector_at(start, v):
                place = builder.add(first_vector, ir.Constant(i64, v))
                return builder.inttoptr(builder.add(start, builder.mul(place, ir.Constant(i64, 8 * LANES))),
                                        vector_ptr)

            def loaded(start):
                slots = [cgutils.alloca_once(builder, vector) for _ in range(count)]
                for v, slot in enumerate(slots):
                    builder.store(builder.load(vector_at(start, v), align=8), slot)
                return slots

            sums = loaded(total_start) if adds else []
            squares = loaded(gaps_start) if gaps else []
            if gaps:
                anchor = [builder.load(vector_at(anchor_start, v), align=8) for v in range(count)]

            def over_rows(begin, end, with_sums, with_squares):
                with cgutils.for_range_slice(builder, begin, end, ir.Constant(i64, 1), inc=True) as (e, _):
                    row = builder.load(builder.gep(index_array.data, [e]))
                    row_start = builder.add(rows_start, builder.mul(_as_i64(builder, row, index_ty.dtype), row_bytes))
                    for v in range(count):
                        term = builder.load(vector_at(row_start, v), align=8)
                        if with_sums:
                            builder.store(builder.fadd(builder.load(sums[v]), term), sums[v])
                        if with_squares:
                            gap = builder.fsub(anchor[v], term)
                            builder.store(builder.fadd(builder.load(squares[v]), builder.fmul(gap, gap)), squares[v])

            if adds:
                over_rows(first, first_gap, True, False)
            if gaps:
                over_rows(first_gap, stop, adds, True)
            for start, slots in ((total_start, sums), (gaps_start if gaps else None, squares)):
                for v, slot in enumerate(slots):
                    builder.store(builder.load(slot), vector_at(start, v), align=8)

        _in_passes(builder, n_vectors, "row_vectors", rows_added)
        return context.get_dummy_value()

    return codegen


def _typed(total, rows, index, scalars):
    return (_is_float64_array(total, 1) and _is_float64_array(rows, 2) and isinstance(index, types.Array)
            and index.ndim == 1 and isinstance(index.dtype, types.Integer)
            and all(isinstance(t, types.Integer) for t in scalars))


@intrinsic
def add_row_vectors(typingctx, total, rows, index, first, stop):
    """total[c] += rows[index[e], c] for e in first..stop-1, in that order, for the
    columns c of rows' whole vectors (c < width // LANES * LANES), up to VECTORS of them a
    pass over the rows.  total : at least those columns, float64, C order; rows : (n,
    width) float64, C order; index : 1-D integer array.  Nothing is checked at run time:
    the caller keeps the indices inside rows."""
    if not _typed(total, rows, index, (first, stop)):
        return None
    return types.void(total, rows, index, first, stop), _row_loop(adds=True, gaps=False)


@intrinsic
def add_squared_gaps(typingctx, total, rows, index, first, stop, anchor):
    """total[c] += (rows[anchor, c] - rows[index[e], c])**2 for e in first..stop-1, in
    that order, for the same columns as add_row_vectors (the square rounded, then the
    sum: no fused multiply-add)."""
    if not _typed(total, rows, index, (first, stop, anchor)):
        return None
    return types.void(total, rows, index, first, stop, anchor), _row_loop(adds=False, gaps=True)


@intrinsic
def add_rows_and_gaps(typingctx, total, gaps, rows, index, first, first_gap, stop, anchor):
    """add_row_vectors(total, rows, index, first, stop) and add_squared_gaps(gaps, rows,
    index, first_gap, stop, anchor) in one loop (first <= first_gap <= stop), each row
    loaded once: the same numbers as the two calls, the first of which waited for rows that
    the second then found in the cache."""
    if not (_typed(total, rows, index, (first, first_gap, stop, anchor)) and _is_float64_array(gaps, 1)):
        return None
    return (types.void(total, gaps, rows, index, first, first_gap, stop, anchor),
            _row_loop(adds=True, gaps=True))


@intrinsic
def store_row(typingctx, out, row_number, row):
    """out[row_number, :] = row.  Where that row of `out` starts on a 64-byte boundary and
    holds whole vectors, by non-temporal stores: the row goes to memory without first
    being read into the cache, which a stream of rows larger than the caches would only
    flush out again.  Elsewhere by plain stores.  `stream_fence` orders them."""
    if not (_is_float64_array(out, 2) and _is_float64_array(row, 1) and isinstance(row_number, types.Integer)):
        return None
    sig = types.void(out, row_number, row)

    def codegen(context, builder, sig, args):
        out_arg, row_number_arg, row_arg = args
        i64 = ir.IntType(64)
        vector = ir.VectorType(ir.DoubleType(), LANES)
        vector_ptr = vector.as_pointer()
        out_array = context.make_array(sig.args[0])(context, builder, out_arg)
        row_array = context.make_array(sig.args[2])(context, builder, row_arg)
        width = builder.extract_value(row_array.shape, 0)
        number = _as_i64(builder, row_number_arg, sig.args[1])
        target = builder.add(builder.ptrtoint(out_array.data, i64),
                             builder.mul(number, builder.extract_value(out_array.strides, 0)))
        source = builder.ptrtoint(row_array.data, i64)
        misaligned = builder.or_(builder.and_(target, ir.Constant(i64, 63)),
                                 builder.and_(width, ir.Constant(i64, LANES - 1)))
        with builder.if_else(builder.icmp_unsigned("==", misaligned, ir.Constant(i64, 0))) as (streamed, plain):
            with streamed:
                hint = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
                n_vectors = builder.udiv(width, ir.Constant(i64, LANES))
                with cgutils.for_range(builder, n_vectors) as loop:
                    offset = builder.mul(loop.index, ir.Constant(i64, 8 * LANES))
                    value = builder.load(builder.inttoptr(builder.add(source, offset), vector_ptr), align=8)
                    store = builder.store(value, builder.inttoptr(builder.add(target, offset), vector_ptr), align=64)
                    store.set_metadata("nontemporal", hint)
            with plain:
                double_ptr = ir.DoubleType().as_pointer()
                with cgutils.for_range(builder, width) as loop:
                    offset = builder.mul(loop.index, ir.Constant(i64, 8))
                    value = builder.load(builder.inttoptr(builder.add(source, offset), double_ptr))
                    builder.store(value, builder.inttoptr(builder.add(target, offset), double_ptr))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def stream_fence(typingctx):
    """A full memory fence: the non-temporal stores before it are visible to every other
    thread and process (and to MPI) before anything after it."""
    sig = types.void()

    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


def _splat(builder, value, kind):
    """`value` in every lane of a vector of type `kind`."""
    lanes = kind.count
    return builder.shuffle_vector(builder.insert_element(ir.Constant(kind, ir.Undefined), value,
                                                         ir.Constant(ir.IntType(32), 0)),
                                  ir.Constant(kind, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def _is_tile(ty):
    return isinstance(ty, types.Array) and ty.ndim == 2 and ty.layout == "C" and ty.dtype in (types.float32,
                                                                                            types.float64)


#: Rows and features of one block of transpose_rows: eight numbers a vector, of either precision.
BLOCK = 8


@intrinsic
def transpose_rows(typingctx, points, start, n, rows_t):
    """rows_t[j, i] = points[start + i, j] for the whole blocks of BLOCK rows (i < n // BLOCK
    * BLOCK) and BLOCK features (j < p // BLOCK * BLOCK): each block's rows loaded as vectors
    and transposed in registers by three rounds of shuffles, instead of 64 numbers copied one
    by one.  Returns (rows, features) done so, (0, 0) where points are not in C order (the
    rows of a block are then not vectors); the caller copies the rest.  points : (rows, p),
    rows_t : (p, tile) in C order, the same type, float32 or float64; nothing checked at run
    time."""
    if not (isinstance(points, types.Array) and points.ndim == 2 and points.dtype in (types.float32, types.float64)
            and _is_tile(rows_t) and points.dtype == rows_t.dtype
            and isinstance(start, types.Integer) and isinstance(n, types.Integer)):
        return None
    sig = types.UniTuple(types.int64, 2)(points, start, n, rows_t)
    single = points.dtype == types.float32
    by_blocks = points.layout == "C"

    def codegen(context, builder, sig, args):
        points_arg, start_arg, n_arg, rows_t_arg = args
        i64 = ir.IntType(64)
        if not by_blocks:
            return context.make_tuple(builder, sig.return_type, [ir.Constant(i64, 0)] * 2)
        itemsize = 4 if single else 8
        vector = ir.VectorType(ir.FloatType() if single else ir.DoubleType(), BLOCK)
        vector_ptr = vector.as_pointer()
        points_array = context.make_array(sig.args[0])(context, builder, points_arg)
        rows_t_array = context.make_array(sig.args[3])(context, builder, rows_t_arg)
        row_bytes = builder.extract_value(points_array.strides, 0)
        feature_bytes = builder.extract_value(rows_t_array.strides, 0)
        block = ir.Constant(i64, BLOCK)
        n_groups = builder.udiv(_as_i64(builder, n_arg, sig.args[2]), block)
        n_blocks = builder.udiv(builder.extract_value(points_array.shape, 1), block)
        first_row = builder.add(builder.ptrtoint(points_array.data, i64),
                                builder.mul(_as_i64(builder, start_arg, sig.args[1]), row_bytes))
        rows_t_start = builder.ptrtoint(rows_t_array.data, i64)
        with cgutils.for_range(builder, n_groups) as groups:
            group_rows = builder.add(first_row, builder.mul(groups.index, builder.mul(block, row_bytes)))
            group_columns = builder.add(rows_t_start, builder.mul(groups.index, ir.Constant(i64, BLOCK * itemsize)))
            with cgutils.for_range(builder, n_blocks) as blocks:
                features = builder.mul(blocks.index, ir.Constant(i64, BLOCK * itemsize))
                rows = [builder.load(builder.inttoptr(builder.add(builder.add(group_rows, builder.mul(
                    ir.Constant(i64, i), row_bytes)), features), vector_ptr), align=itemsize) for i in range(BLOCK)]
                # Swap the off-diagonal s x s blocks of every 2s x 2s block, s = 4, 2, 1.
                size = BLOCK // 2
                while size:
                    low = ir.Constant(ir.VectorType(ir.IntType(32), BLOCK),
                                      [q if not q & size else BLOCK + q - size for q in range(BLOCK)])
                    high = ir.Constant(ir.VectorType(ir.IntType(32), BLOCK),
                                       [q + size if not q & size else BLOCK + q for q in range(BLOCK)])
                    for i in range(BLOCK):
                        if not i & size:
                            rows[i], rows[i + size] = (builder.shuffle_vector(rows[i], rows[i + size], low),
                                                       builder.shuffle_vector(rows[i], rows[i + size], high))
                    size //= 2
                first_feature = builder.mul(blocks.index, block)
                for j, column in enumerate(rows):
                    place = builder.add(group_columns, builder.mul(builder.add(first_feature, ir.Constant(i64, j)),
                                                                   feature_bytes))
                    builder.store(column, builder.inttoptr(place, vector_ptr), align=itemsize)
        done = [builder.mul(n_groups, block), builder.mul(n_blocks, block)]
        return context.make_tuple(builder, sig.return_type, done)

    return sig, codegen


@intrinsic
def tile_center_distances(typingctx, dist, rows_t, center, n_vectors):
    """dist[k, i] = sum over j in order of (rows_t[j, i] - center[k, j])**2, starting from 0,
    for every center k and the rows i < n_vectors * lanes (lanes: 64 bytes of the data's
    type), each row's features added in order like the reference kernel's loop.  A vector
    of rows at a time, against up to VECTORS centers in registers: each center's additions
    are a chain of its own, and an agent of 16 rows has one or two vectors, too few to
    hide a chain's latency.  dist : (K, tile), rows_t : (p, tile) and center : (K, p), C
    order, of the data's type; rows_t and dist hold whole vectors up to n_vectors (the
    caller's tile is a multiple of the lanes)."""
    if not (all(_is_tile(a) for a in (dist, rows_t, center)) and dist.dtype == center.dtype == rows_t.dtype
            and isinstance(n_vectors, types.Integer)):
        return None
    sig = types.void(dist, rows_t, center, n_vectors)
    single = rows_t.dtype == types.float32

    def codegen(context, builder, sig, args):
        dist_arg, rows_arg, center_arg, n_vectors_arg = args
        i64 = ir.IntType(64)
        scalar = ir.FloatType() if single else ir.DoubleType()
        itemsize = 4 if single else 8
        lanes = 64 // itemsize
        vector = ir.VectorType(scalar, lanes)
        vector_ptr = vector.as_pointer()
        dist_array = context.make_array(sig.args[0])(context, builder, dist_arg)
        rows_array = context.make_array(sig.args[1])(context, builder, rows_arg)
        center_array = context.make_array(sig.args[2])(context, builder, center_arg)
        n_clusters = builder.extract_value(center_array.shape, 0)
        n_features = builder.extract_value(rows_array.shape, 0)
        feature_bytes = builder.extract_value(rows_array.strides, 0)
        center_bytes = builder.extract_value(center_array.strides, 0)
        dist_bytes = builder.extract_value(dist_array.strides, 0)
        n_vectors = _as_i64(builder, n_vectors_arg, sig.args[3])
        rows_start = builder.ptrtoint(rows_array.data, i64)
        dist_start = builder.ptrtoint(dist_array.data, i64)
        center_start = builder.ptrtoint(center_array.data, i64)
        zeros = ir.Constant(vector, [0.0] * lanes)

        with cgutils.for_range(builder, n_vectors) as row_loop:
            row_offset = builder.mul(row_loop.index, ir.Constant(i64, 64))

            def distances(count, first_center):
                sums = [cgutils.alloca_once(builder, vector) for _ in range(count)]
                for slot in sums:
                    builder.store(zeros, slot)
                with cgutils.for_range(builder, n_features) as loop:
                    j = loop.index
                    rows = builder.add(builder.add(rows_start, builder.mul(j, feature_bytes)), row_offset)
                    x = builder.load(builder.inttoptr(rows, vector_ptr), align=itemsize)
                    for g, slot in enumerate(sums):
                        k = builder.add(first_center, ir.Constant(i64, g))
                        place = builder.add(builder.add(center_start, builder.mul(k, center_bytes)),
                                            builder.mul(j, ir.Constant(i64, itemsize)))
                        c = _splat(builder, builder.load(builder.inttoptr(place, scalar.as_pointer())), vector)
                        gap = builder.fsub(x, c)
                        builder.store(builder.fadd(builder.load(slot), builder.fmul(gap, gap)), slot)
                for g, slot in enumerate(sums):
                    k = builder.add(first_center, ir.Constant(i64, g))
                    place = builder.add(builder.add(dist_start, builder.mul(k, dist_bytes)), row_offset)
                    builder.store(builder.load(slot), builder.inttoptr(place, vector_ptr), align=itemsize)

            _in_passes(builder, n_clusters, "centers", distances)
        return context.get_dummy_value()

    return sig, codegen


def _smaller(builder, a, b):
    """numba's min(a, b), lane by lane: b where b < a, else a."""
    return builder.select(builder.fcmp_ordered("<", b, a), b, a)


def _larger(builder, a, b):
    """numba's max(a, b), lane by lane: b where b > a, else a."""
    return builder.select(builder.fcmp_ordered(">", b, a), b, a)


def _ranking_slots(builder):
    """Slots of a lane-wise ranking, nothing seen yet: (smallest inf, its index 0, second inf)."""
    vector, indices = ir.VectorType(ir.DoubleType(), LANES), ir.VectorType(ir.IntType(64), LANES)
    slots = tuple(cgutils.alloca_once(builder, kind) for kind in (vector, indices, vector))
    infinite = ir.Constant(vector, [float("inf")] * LANES)
    for slot, start in zip(slots, (infinite, ir.Constant(indices, [0] * LANES), infinite)):
        builder.store(start, slot)
    return slots


def _rank_lanes(builder, slots, e, ks):
    """local_pass._ranked, lane by lane: each lane sees candidate ks at e after those before."""
    best_slot, index_slot, second_slot = slots
    best, second = builder.load(best_slot), builder.load(second_slot)
    builder.store(_smaller(builder, second, _larger(builder, e, best)), second_slot)
    builder.store(builder.select(builder.fcmp_ordered("<", e, best), ks, builder.load(index_slot)), index_slot)
    builder.store(_smaller(builder, e, best), best_slot)


def _load_vector(builder, address, single):
    """LANES numbers of the data's precision from `address` (an integer), as float64."""
    f64 = ir.DoubleType()
    numbers = ir.VectorType(ir.FloatType() if single else f64, LANES)
    values = builder.load(builder.inttoptr(address, numbers.as_pointer()), align=4 if single else 8)
    return builder.fpext(values, ir.VectorType(f64, LANES)) if single else values


@intrinsic
def rank_row(typingctx, tile, row, center_norm):
    """(best, smallest, second smallest) of e_k = center_norm[k] - 2 tile[row, k] over the
    centers k < K (tile's columns, its type float32 or float64, e in float64): the same as
    ranking them one by one in order (local_pass._ranked: ties keep the lower index; the
    second smallest counts a tie with the smallest), for finite e.  Eight centers a vector,
    each lane ranking its own, then the lanes merged: a row's K candidates take a few vector
    operations instead of a chain of K.  Reads whole vectors: tile's buffer and center_norm
    must hold LANES numbers past the row's K (their lanes are masked out)."""
    if not (_is_tile(tile) and isinstance(row, types.Integer) and _is_float64_array(center_norm, 1)):
        return None
    sig = types.Tuple((types.int64, types.float64, types.float64))(tile, row, center_norm)
    single = tile.dtype == types.float32

    def codegen(context, builder, sig, args):
        tile_arg, row_arg, norm_arg = args
        i64, f64 = ir.IntType(64), ir.DoubleType()
        vector, indices = ir.VectorType(f64, LANES), ir.VectorType(i64, LANES)
        tile_array = context.make_array(sig.args[0])(context, builder, tile_arg)
        norm_array = context.make_array(sig.args[2])(context, builder, norm_arg)
        n_clusters = builder.extract_value(tile_array.shape, 1)
        row_start = builder.add(builder.ptrtoint(tile_array.data, i64),
                                builder.mul(_as_i64(builder, row_arg, sig.args[1]),
                                            builder.extract_value(tile_array.strides, 0)))
        norm_start = builder.ptrtoint(norm_array.data, i64)
        lanes = ir.Constant(indices, list(range(LANES)))
        infinite = ir.Constant(vector, [float("inf")] * LANES)
        two = ir.Constant(vector, [2.0] * LANES)
        slots = _ranking_slots(builder)
        with cgutils.for_range_slice(builder, ir.Constant(i64, 0), n_clusters, ir.Constant(i64, LANES),
                                     inc=True) as (first, _):
            values = _load_vector(builder, builder.add(row_start, builder.mul(first, ir.Constant(i64, 4 if single
                                                                                                else 8))), single)
            norms = builder.load(builder.inttoptr(builder.add(norm_start, builder.mul(first, ir.Constant(i64, 8))),
                                                  vector.as_pointer()), align=8)
            ks = builder.add(_splat(builder, first, indices), lanes)
            e = builder.select(builder.icmp_signed("<", ks, _splat(builder, n_clusters, indices)),
                               builder.fsub(norms, builder.fmul(two, values)), infinite)
            _rank_lanes(builder, slots, e, ks)      # each lane sees its centers in ascending order
        best, index, second = (builder.load(slot) for slot in slots)

        def across(value, kind, pick):      # pick over the lanes, as a tree of shuffles
            width = LANES // 2
            while width:
                mask = ir.Constant(ir.VectorType(ir.IntType(32), LANES), [(j + width) % LANES for j in range(LANES)])
                value = pick(value, builder.shuffle_vector(value, ir.Constant(kind, ir.Undefined), mask))
                width //= 2
            return builder.extract_element(value, ir.Constant(ir.IntType(32), 0))

        smallest = across(best, vector, lambda a, b: _smaller(builder, a, b))
        # The lowest center index among the lanes holding the smallest; then the second smallest:
        # the winning lane's second, or any other lane's smallest.
        holding = builder.fcmp_ordered("==", best, _splat(builder, smallest, vector))
        beyond = ir.Constant(indices, [2**62] * LANES)
        winner = across(builder.select(holding, index, beyond), indices,
                        lambda a, b: builder.select(builder.icmp_signed("<", b, a), b, a))
        won = builder.icmp_signed("==", index, _splat(builder, winner, indices))
        second_smallest = across(builder.select(builder.and_(holding, won), second, best), vector,
                                 lambda a, b: _smaller(builder, a, b))
        return context.make_tuple(builder, sig.return_type, [winner, smallest, second_smallest])

    return sig, codegen


def _rank_columns_of(context, builder, sig, dist_arg, first_arg):
    """The lane-wise ranking of rank_columns: (smallest, its index, second smallest) of the
    LANES columns from `first` of dist (sig.args[0]), as vectors."""
    i64 = ir.IntType(64)
    single = sig.args[0].dtype == types.float32
    dist_array = context.make_array(sig.args[0])(context, builder, dist_arg)
    start = builder.add(builder.ptrtoint(dist_array.data, i64),
                        builder.mul(_as_i64(builder, first_arg, sig.args[1]), ir.Constant(i64, 4 if single else 8)))
    stride = builder.extract_value(dist_array.strides, 0)
    slots = _ranking_slots(builder)
    with cgutils.for_range(builder, builder.extract_value(dist_array.shape, 0)) as loop:
        e = _load_vector(builder, builder.add(start, builder.mul(loop.index, stride)), single)
        _rank_lanes(builder, slots, e, _splat(builder, loop.index, ir.VectorType(i64, LANES)))
    return tuple(builder.load(slot) for slot in slots)


def _store_at(builder, value, array_start, column_bytes, align=8):
    """Store the vector `value` at byte `column_bytes` of an array starting at `array_start`."""
    address = builder.add(array_start, column_bytes)
    builder.store(value, builder.inttoptr(address, value.type.as_pointer()), align=align)


def _is_ranking(dist, first, ranked_best):
    return (_is_tile(dist) and isinstance(first, types.Integer) and isinstance(ranked_best, types.Array)
            and ranked_best.dtype == types.int64 and ranked_best.ndim == 1 and ranked_best.layout == "C")


@intrinsic
def rank_columns(typingctx, dist, first, ranked_best, ranked):
    """Rank the LANES columns c = first, first + 1, ... of dist (K x rows, float32 or
    float64), each over its K rows, as local_pass._ranked one by one in order: column c's
    best row into ranked_best[c] (int64), its smallest and second smallest, in float64, into
    ranked[0, c] and ranked[1, c].  The columns are the lanes of one vector, so a tile's
    rows are ranked eight at a time with the same comparisons, in the same order, as each
    alone.  Reads and writes whole vectors: dist, ranked_best and ranked must have at least
    first + LANES columns (those past the tile's rows are ranked too, and ignored)."""
    if not (_is_ranking(dist, first, ranked_best) and _is_float64_array(ranked, 2)):
        return None
    sig = types.void(dist, first, ranked_best, ranked)

    def codegen(context, builder, sig, args):
        dist_arg, first_arg, best_arg, ranked_arg = args
        i64 = ir.IntType(64)
        best, index, second = _rank_columns_of(context, builder, sig, dist_arg, first_arg)
        best_array = context.make_array(sig.args[2])(context, builder, best_arg)
        ranked_array = context.make_array(sig.args[3])(context, builder, ranked_arg)
        column = builder.mul(_as_i64(builder, first_arg, sig.args[1]), ir.Constant(i64, 8))
        ranked_start = builder.ptrtoint(ranked_array.data, i64)
        _store_at(builder, index, builder.ptrtoint(best_array.data, i64), column)
        _store_at(builder, best, ranked_start, column)
        _store_at(builder, second, builder.add(ranked_start, builder.extract_value(ranked_array.strides, 0)), column)
        return context.get_dummy_value()

    return sig, codegen


#: local_pass's float32 storage of the bounds (_store_upper, _store_lower): each is padded by
#: BOUND_PAD relative, so that rounding to nearest stays outwards, and kept within BOUND_TINY
#: and BOUND_MAX.
BOUND_PAD, BOUND_MAX, BOUND_TINY = 2.0 ** -22, 3.0e38, 1e-37
#: local_pass._fold_row rounds the gap between a row's bounds down by this factor.
FOLD_SHRINK = 1.0 - 2.0 ** -50


def _stored_upper(builder, value):
    """local_pass._store_upper lane by lane: a float32 at least `value` (inf beyond float32)."""
    f64, f32 = value.type.element, ir.FloatType()
    lanes = value.type.count
    padded = builder.fmul(value, ir.Constant(value.type, [1.0 + BOUND_PAD] * lanes))
    kept = builder.fptrunc(_larger(builder, padded, ir.Constant(value.type, [BOUND_TINY] * lanes)),
                           ir.VectorType(f32, lanes))
    beyond = builder.fcmp_ordered(">", padded, ir.Constant(ir.VectorType(f64, lanes), [BOUND_MAX] * lanes))
    return builder.select(beyond, ir.Constant(ir.VectorType(f32, lanes), [float("inf")] * lanes), kept)


def _stored_lower(builder, value):
    """local_pass._store_lower lane by lane: a float32 at most `value` (0 when tiny)."""
    f32 = ir.FloatType()
    lanes = value.type.count
    padded = builder.fmul(value, ir.Constant(value.type, [1.0 - BOUND_PAD] * lanes))
    kept = builder.fptrunc(_smaller(builder, padded, ir.Constant(value.type, [BOUND_MAX] * lanes)),
                           ir.VectorType(f32, lanes))
    tiny = builder.fcmp_ordered("<", padded, ir.Constant(value.type, [BOUND_TINY] * lanes))
    return builder.select(tiny, ir.Constant(ir.VectorType(f32, lanes), [0.0] * lanes), kept)


@intrinsic
def rank_bound_columns(typingctx, dist, first, ranked_best, bounds, exact_err, f64_err, eta):
    """rank_columns's ranking of the LANES columns from `first`, the best into ranked_best,
    then each column's bounds as local_pass stores them, in float32, into bounds (3, columns):
    the upper bound into bounds[0] and the lower into bounds[1] (_keep_exact_bounds of the
    smallest and second smallest), and their gap as _fold_row folds it into bounds[2].  The
    same operations lane by lane as those functions row by row, so the same numbers; a tile's
    divisions and square roots go eight rows a vector.  Whole vectors, like rank_columns."""
    if not (_is_ranking(dist, first, ranked_best) and isinstance(bounds, types.Array) and bounds.ndim == 2
            and bounds.dtype == types.float32 and bounds.layout == "C"
            and all(isinstance(t, types.Float) for t in (exact_err, f64_err, eta))):
        return None
    sig = types.void(dist, first, ranked_best, bounds, exact_err, f64_err, eta)

    def codegen(context, builder, sig, args):
        dist_arg, first_arg, best_arg, bounds_arg = args[:4]
        i64, f64 = ir.IntType(64), ir.DoubleType()
        # float32 terms meet float64 distances: numba widens them first, exactly
        err_arg, f64_err_arg, eta_arg = (builder.fpext(a, f64) if a.type != f64 else a for a in args[4:])
        vector = ir.VectorType(f64, LANES)
        smallest, index, second = _rank_columns_of(context, builder, sig, dist_arg, first_arg)
        one = ir.Constant(f64, 1.0)
        eta = _splat(builder, eta_arg, vector)
        zero = ir.Constant(vector, [0.0] * LANES)
        # _keep_exact_bounds: the true squared distances' bounds, then _keep_bounds (err 0.0)
        best_bound = builder.fdiv(builder.fadd(smallest, eta), _splat(builder, builder.fsub(one, err_arg), vector))
        second_bound = builder.fdiv(_larger(builder, builder.fsub(second, eta), zero),
                                    _splat(builder, builder.fadd(one, err_arg), vector))
        sqrt = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector]),
                                              f"llvm.sqrt.v{LANES}f64")
        upper = _stored_upper(builder, builder.fmul(builder.call(sqrt, [builder.fadd(best_bound, zero)]),
                                                    _splat(builder, builder.fadd(one, f64_err_arg), vector)))
        lower = _stored_lower(builder, builder.fmul(
            builder.call(sqrt, [_larger(builder, builder.fsub(second_bound, zero), zero)]),
            _splat(builder, builder.fsub(one, f64_err_arg), vector)))
        # _fold_row's gap of the stored bounds
        apart = builder.fmul(builder.fsub(builder.fpext(lower, vector), builder.fpext(upper, vector)),
                             ir.Constant(vector, [FOLD_SHRINK] * LANES))
        gap = builder.select(builder.fcmp_ordered(">", apart, zero), _stored_lower(builder, apart),
                             ir.Constant(ir.VectorType(ir.FloatType(), LANES), [-1.0] * LANES))
        best_array = context.make_array(sig.args[2])(context, builder, best_arg)
        bounds_array = context.make_array(sig.args[3])(context, builder, bounds_arg)
        first = _as_i64(builder, first_arg, sig.args[1])
        _store_at(builder, index, builder.ptrtoint(best_array.data, i64), builder.mul(first, ir.Constant(i64, 8)))
        bounds_start = builder.ptrtoint(bounds_array.data, i64)
        bounds_stride = builder.extract_value(bounds_array.strides, 0)
        for b, value in enumerate((upper, lower, gap)):
            _store_at(builder, value, builder.add(bounds_start, builder.mul(ir.Constant(i64, b), bounds_stride)),
                      builder.mul(first, ir.Constant(i64, 4)), align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def add_weighted_row(typingctx, sums, at, label, points, row, weight):
    """sums[at, label, j] += weight * points[row, j] (in float64) for every feature j: whole
    vectors of LANES features, then the last p % LANES one by one; each number gets the
    scalar loop's multiplication and addition.  sums : (n, K, p) float64, points : (rows, p)
    float32 or float64, both C order; nothing checked at run time."""
    if not (_is_float64_array(sums, 3) and _is_tile(points)
            and all(isinstance(t, types.Integer) for t in (at, label, row)) and isinstance(weight, types.Float)):
        return None
    sig = types.void(sums, at, label, points, row, weight)
    single = points.dtype == types.float32

    def codegen(context, builder, sig, args):
        sums_arg, at_arg, label_arg, points_arg, row_arg, weight_arg = args
        i64, f64 = ir.IntType(64), ir.DoubleType()
        vector = ir.VectorType(f64, LANES)
        itemsize = 4 if single else 8
        sums_array = context.make_array(sig.args[0])(context, builder, sums_arg)
        points_array = context.make_array(sig.args[3])(context, builder, points_arg)
        n_features = builder.extract_value(points_array.shape, 1)
        total_start = builder.add(builder.ptrtoint(sums_array.data, i64), builder.add(
            builder.mul(_as_i64(builder, at_arg, sig.args[1]), builder.extract_value(sums_array.strides, 0)),
            builder.mul(_as_i64(builder, label_arg, sig.args[2]), builder.extract_value(sums_array.strides, 1))))
        row_start = builder.add(builder.ptrtoint(points_array.data, i64),
                                builder.mul(_as_i64(builder, row_arg, sig.args[4]),
                                            builder.extract_value(points_array.strides, 0)))
        weight = builder.fpext(weight_arg, f64) if weight_arg.type != f64 else weight_arg   # (as numba widens it)
        weights = _splat(builder, weight, vector)
        n_full = builder.udiv(n_features, ir.Constant(i64, LANES))
        with cgutils.for_range(builder, n_full) as loop:
            total = builder.inttoptr(builder.add(total_start, builder.mul(loop.index, ir.Constant(i64, 8 * LANES))),
                                     vector.as_pointer())
            values = _load_vector(builder, builder.add(row_start, builder.mul(loop.index,
                                                                              ir.Constant(i64, itemsize * LANES))),
                                  single)
            builder.store(builder.fadd(builder.load(total, align=8), builder.fmul(weights, values)), total, align=8)
        scalar = ir.FloatType() if single else f64
        with cgutils.for_range_slice(builder, builder.mul(n_full, ir.Constant(i64, LANES)), n_features,
                                     ir.Constant(i64, 1), inc=True) as (j, _):
            total = builder.inttoptr(builder.add(total_start, builder.mul(j, ir.Constant(i64, 8))), f64.as_pointer())
            value = builder.load(builder.inttoptr(builder.add(row_start, builder.mul(j, ir.Constant(i64, itemsize))),
                                                  scalar.as_pointer()))
            value = builder.fpext(value, f64) if single else value
            builder.store(builder.fadd(builder.load(total), builder.fmul(weight, value)), total)
        return context.get_dummy_value()

    return sig, codegen


def _sum_lanes_of_each(builder, vectors):
    """[sum of vectors[0]'s lanes, ..., sum of vectors[LANES - 1]'s lanes] as one vector: a
    tree of shuffles and additions, each level adding the two halves of blocks of `width`
    lanes of two vectors (pairs of lanes, then of pairs, then of fours)."""
    width = 1
    while len(vectors) > 1:
        # a's and b's blocks alternate; each block's first half, then its second
        low = [(j // width) % 2 * LANES + (j // (2 * width)) * 2 * width + j % width for j in range(LANES)]
        masks = [ir.Constant(ir.VectorType(ir.IntType(32), LANES), [i + half for i in low]) for half in (0, width)]
        vectors = [builder.fadd(*(builder.shuffle_vector(a, b, mask) for mask in masks))
                   for a, b in zip(vectors[::2], vectors[1::2])]
        width *= 2
    return vectors[0]


@intrinsic
def add_moves(typingctx, moved, agent, x, o, n_features, single, f64_err, eta):
    """moved[agent, k] += how far center k moved from x to o (flat K x p rows), rounded up:
    the true distance between the two rounded to the data's precision (float32 when
    `single`), plus the float64 error `f64_err` of its sum of squares (in any order), of its
    square root and of the addition, plus `eta` for underflow.  Eight centers a vector: each
    center's squared differences summed in lanes, then the eight centers' lanes summed
    together by a tree of shuffles, and their square roots taken at once."""
    if not (_is_float64_array(moved, 2) and isinstance(agent, types.Integer) and _is_float64_array(x, 1)
            and _is_float64_array(o, 1) and isinstance(n_features, types.Integer)
            and isinstance(single, types.Boolean) and isinstance(f64_err, types.Float)
            and isinstance(eta, types.Float)):
        return None
    sig = types.void(moved, agent, x, o, n_features, single, f64_err, eta)

    def codegen(context, builder, sig, args):
        moved_arg, agent_arg, x_arg, o_arg, p_arg, single_arg, err_arg, eta_arg = args
        i64, i32, f64 = ir.IntType(64), ir.IntType(32), ir.DoubleType()
        vector, indices = ir.VectorType(f64, LANES), ir.VectorType(i64, LANES)
        zero = ir.Constant(vector, [0.0] * LANES)
        moved_array = context.make_array(sig.args[0])(context, builder, moved_arg)
        n_clusters = builder.extract_value(moved_array.shape, 1)
        n_features = _as_i64(builder, p_arg, sig.args[4])
        row_bytes = builder.mul(n_features, ir.Constant(i64, 8))
        x_start = builder.ptrtoint(context.make_array(sig.args[2])(context, builder, x_arg).data, i64)
        o_start = builder.ptrtoint(context.make_array(sig.args[3])(context, builder, o_arg).data, i64)
        moved_start = builder.add(builder.ptrtoint(moved_array.data, i64),
                                  builder.mul(_as_i64(builder, agent_arg, sig.args[1]),
                                              builder.extract_value(moved_array.strides, 0)))
        n_full = builder.udiv(n_features, ir.Constant(i64, LANES))
        full_bytes = builder.mul(n_full, ir.Constant(i64, 8 * LANES))
        n_tail = builder.sub(n_features, builder.mul(n_full, ir.Constant(i64, LANES)))
        last = builder.sub(n_clusters, ir.Constant(i64, 1))
        total_slot = cgutils.alloca_once(builder, vector)
        x_slot, o_slot = cgutils.alloca_once(builder, vector), cgutils.alloca_once(builder, vector)
        sqrt = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector]),
                                              f"llvm.sqrt.v{LANES}f64")
        one_plus = _splat(builder, builder.fadd(ir.Constant(f64, 1.0), err_arg), vector)
        eta_vector = _splat(builder, eta_arg, vector)

        def vector_at(address):
            return builder.load(builder.inttoptr(address, vector.as_pointer()), align=8)

        def groups(narrow):             # narrow: the centers rounded to float32 first
            def add_squares(x_values, o_values):
                if narrow:
                    single_vector = ir.VectorType(ir.FloatType(), LANES)
                    x_values, o_values = (builder.fpext(builder.fptrunc(v, single_vector), vector)
                                          for v in (x_values, o_values))
                gap = builder.fsub(o_values, x_values)
                builder.store(builder.fadd(builder.load(total_slot), builder.fmul(gap, gap)), total_slot)

            with cgutils.for_range_slice(builder, ir.Constant(i64, 0), n_clusters, ir.Constant(i64, LANES),
                                         inc=True) as (group, _):
                squares = []
                for c in range(LANES):
                    k = builder.add(group, ir.Constant(i64, c))
                    inside = builder.icmp_signed("<", k, n_clusters)
                    base = builder.mul(builder.select(inside, k, last), row_bytes)   # past K: the last again
                    builder.store(zero, total_slot)
                    with cgutils.for_range(builder, n_full) as loop:
                        offset = builder.add(base, builder.mul(loop.index, ir.Constant(i64, 8 * LANES)))
                        add_squares(vector_at(builder.add(x_start, offset)), vector_at(builder.add(o_start, offset)))
                    with builder.if_then(builder.icmp_unsigned("!=", n_tail, ir.Constant(i64, 0))):
                        builder.store(zero, x_slot)
                        builder.store(zero, o_slot)
                        with cgutils.for_range(builder, n_tail) as loop:
                            offset = builder.add(builder.add(base, full_bytes),
                                                 builder.mul(loop.index, ir.Constant(i64, 8)))
                            for slot, start in ((x_slot, x_start), (o_slot, o_start)):
                                number = builder.load(builder.inttoptr(builder.add(start, offset), f64.as_pointer()))
                                builder.store(builder.insert_element(builder.load(slot), number, loop.index), slot)
                        add_squares(builder.load(x_slot), builder.load(o_slot))
                    squares.append(builder.select(inside, builder.load(total_slot), zero))
                gaps = _sum_lanes_of_each(builder, squares)

                def moved_after(before):
                    return builder.fmul(builder.fadd(builder.fadd(before, builder.fmul(builder.call(sqrt, [gaps]),
                                                                                       one_plus)), eta_vector),
                                        one_plus)

                first = builder.add(moved_start, builder.mul(group, ir.Constant(i64, 8)))
                whole = builder.icmp_signed("<=", builder.add(group, ir.Constant(i64, LANES)), n_clusters)
                with builder.if_else(whole, likely=True) as (eight, fewer):
                    with eight:
                        address = builder.inttoptr(first, vector.as_pointer())
                        builder.store(moved_after(builder.load(address, align=8)), address, align=8)
                    with fewer:             # the last centers, one by one
                        ks = builder.add(_splat(builder, group, indices), ir.Constant(indices, list(range(LANES))))
                        inside = builder.icmp_signed("<", ks, _splat(builder, n_clusters, indices))
                        slots = builder.add(_splat(builder, moved_start, indices),
                                            builder.mul(builder.select(inside, ks, _splat(builder, last, indices)),
                                                        ir.Constant(indices, [8] * LANES)))
                        lanes = [ir.Constant(i32, c) for c in range(LANES)]
                        addresses = [builder.inttoptr(builder.extract_element(slots, lane), f64.as_pointer())
                                     for lane in lanes]
                        before = zero
                        for lane, address in zip(lanes, addresses):     # past K: the last again, not stored
                            before = builder.insert_element(before, builder.load(address), lane)
                        after = moved_after(before)
                        for lane, address in zip(lanes, addresses):
                            with builder.if_then(builder.extract_element(inside, lane)):
                                builder.store(builder.extract_element(after, lane), address)

        with builder.if_else(single_arg) as (narrow, wide):
            with narrow:
                groups(True)
            with wide:
                groups(False)
        return context.get_dummy_value()

    return sig, codegen


def _prefetch_lines(builder, start, row_bytes):
    """Asks the caches for every 64-byte line of the row of row_bytes bytes at `start`; none
    where row_bytes is 0 or less (a backward span, or a reversed array's negative stride)."""
    i64, i32 = ir.IntType(64), ir.IntType(32)
    i8p = ir.IntType(8).as_pointer()
    prefetch = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                              "llvm.prefetch.p0i8")
    # Signed: for_range compares signed, so a count of 0 or less runs no iteration.
    n_lines = builder.sdiv(builder.add(row_bytes, ir.Constant(i64, 63)), ir.Constant(i64, 64))
    with cgutils.for_range(builder, n_lines) as loop:
        line = builder.add(start, builder.mul(loop.index, ir.Constant(i64, 64)))
        # A read, to be kept in every level of cache, of data.
        builder.call(prefetch, [builder.inttoptr(line, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                                ir.Constant(i32, 1)])


def _row_start(context, builder, rows_type, rows_arg, number):
    """(where row `number` of the array starts, its first axis's stride), both in bytes."""
    rows_array = context.make_array(rows_type)(context, builder, rows_arg)
    row_bytes = builder.extract_value(rows_array.strides, 0)
    start = builder.add(builder.ptrtoint(rows_array.data, ir.IntType(64)), builder.mul(number, row_bytes))
    return start, row_bytes


@intrinsic
def prefetch_rows(typingctx, rows, index, first, stop):
    """Prefetches rows[index[e]] for e in first..stop-1 (every line of each), the way a
    load would bring them, without waiting for them and without faulting.  rows : 2-D
    C order; index : 1-D integer array."""
    if not (isinstance(rows, types.Array) and rows.ndim == 2 and rows.layout == "C"
            and isinstance(index, types.Array) and index.ndim == 1 and isinstance(index.dtype, types.Integer)
            and isinstance(first, types.Integer) and isinstance(stop, types.Integer)):
        return None
    sig = types.void(rows, index, first, stop)

    def codegen(context, builder, sig, args):
        rows_arg, index_arg, first_arg, stop_arg = args
        index_array = context.make_array(sig.args[1])(context, builder, index_arg)
        first, stop = _as_i64(builder, first_arg, sig.args[2]), _as_i64(builder, stop_arg, sig.args[3])
        with cgutils.for_range_slice(builder, first, stop, ir.Constant(ir.IntType(64), 1), inc=True) as (e, _):
            row = _as_i64(builder, builder.load(builder.gep(index_array.data, [e])), sig.args[1].dtype)
            _prefetch_lines(builder, *_row_start(context, builder, sig.args[0], rows_arg, row))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch_span(typingctx, array, first, stop):
    """Prefetches array[first:stop] along its first axis (every line of those items or
    rows), as prefetch_rows does; nothing where stop <= first.  For an array whose first
    axis is not contiguous, the lines from its item `first` to its item `stop` are asked
    for (none where its stride is negative): harmless, and of no use."""
    if not (isinstance(array, types.Array) and isinstance(first, types.Integer) and isinstance(stop, types.Integer)):
        return None
    sig = types.void(array, first, stop)

    def codegen(context, builder, sig, args):
        array_arg, first_arg, stop_arg = args
        first, stop = _as_i64(builder, first_arg, sig.args[1]), _as_i64(builder, stop_arg, sig.args[2])
        start, item_bytes = _row_start(context, builder, sig.args[0], array_arg, first)
        _prefetch_lines(builder, start, builder.mul(builder.sub(stop, first), item_bytes))
        return context.get_dummy_value()

    return sig, codegen
