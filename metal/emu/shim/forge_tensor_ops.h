// forge_tensor_ops.h — the emulator's (package metal/emu) subset of MSL 4.0
// tensors and of Apple's MetalPerformancePrimitives tensor ops, for kernel
// files that include <metal_tensor> or
// <MetalPerformancePrimitives/MetalPerformancePrimitives.h> (those headers
// are empty stubs here). Like metal_shim.h it is force-included (after it,
// at global scope) into such a file's translation unit, which compiles as
// C++20 (matmul2d's descriptor is a class-type template argument).
#pragma once

// ---- metal_tensor ------------------------------------------------------------------
// <metal_tensor>'s extents, dextents, tensor<…, tensor_inline> over a
// pointer with extents and strides, slice(), <metal_cooperative_tensor>'s
// cooperative_tensor (the destination kind matmul2d hands out) and the
// execution scopes execution_thread / execution_simdgroup(s)<N>.
//
// Conventions, as in Apple's headers (MetalPerformancePrimitives'
// MPPTensorOpsMatMul2d.h documents them): coordinate 0 (x) is the innermost
// axis — a row-major M × K matrix is a tensor of extents (K, M) with strides
// (1, row stride) — and t.slice(x, y) is the tensor with its origin moved
// to (x, y) and the extents that remain from there (bounds are checked
// against the original tensor's).
//
// The cooperative tensor's layout is implementation-defined on the GPU;
// the emulator's (see cooperative_tensor below) is deliberately not a
// simple one: every thread has one slot more than it needs, never valid,
// whose coordinates are (0, 0) — a kernel that ignores is_valid_element()
// overwrites element (0, 0) of its tile — and a new tensor's elements are
// NaN, not zero.

#ifndef FORGE_EMU_METAL_ARRAY
#define FORGE_EMU_METAL_ARRAY 1
namespace metal {
// array<T, N> (<metal_array>), as far as tensors need it: an aggregate.
template <class T, size_t N> struct array {
    T forge_v[N];
    constexpr T& operator[](size_t i) { return forge_v[i]; }
    constexpr const T& operator[](size_t i) const { return forge_v[i]; }
    constexpr size_t size() const { return N; }
};
}  // namespace metal
#endif

namespace metal {

constexpr size_t dynamic_extent = (size_t)-1;

// ---- extents ---------------------------------------------------------------------
// extents<IndexType, E...>: E a size or dynamic_extent. Built from the
// dynamic extents only, or from all of them (std::extents' two forms).
template <class IndexType, size_t... E> struct extents {
    typedef IndexType index_type;
    static constexpr size_t forge_rank = sizeof...(E);
    static constexpr size_t forge_static[sizeof...(E) > 0 ? sizeof...(E) : 1] = {E...};
    static constexpr size_t forge_ndyn = ((E == dynamic_extent ? 1 : 0) + ... + 0);
    IndexType forge_e[sizeof...(E) > 0 ? sizeof...(E) : 1];

    constexpr extents() {
        for (size_t r = 0; r < forge_rank; r++) forge_e[r] = forge_static[r] == dynamic_extent ? 0 : (IndexType)forge_static[r];
    }
    template <class... I, class = typename ::forge_emu::enable_if<sizeof...(I) == forge_rank && forge_rank != forge_ndyn>::type>
    constexpr explicit extents(I... all) : forge_e{(IndexType)all...} {}
    template <class... I, class = typename ::forge_emu::enable_if<sizeof...(I) == forge_ndyn && sizeof...(I) != 0>::type, class = void>
    constexpr explicit extents(I... dyn) {
        const IndexType d[] = {(IndexType)dyn...};
        size_t j = 0;
        for (size_t r = 0; r < forge_rank; r++) forge_e[r] = forge_static[r] == dynamic_extent ? d[j++] : (IndexType)forge_static[r];
    }
    static constexpr size_t rank() { return forge_rank; }
    static constexpr size_t rank_dynamic() { return forge_ndyn; }
    static constexpr size_t static_extent(size_t r) { return forge_static[r]; }
    constexpr IndexType extent(size_t r) const { return forge_e[r]; }
};

namespace tensor_detail {
template <class IndexType, size_t Rank, size_t... E> struct dext : dext<IndexType, Rank - 1, dynamic_extent, E...> {};
template <class IndexType, size_t... E> struct dext<IndexType, 0, E...> { typedef extents<IndexType, E...> type; };
template <class T> struct strip_as { typedef T type; };
template <class T> struct strip_as<const T> { typedef typename strip_as<T>::type type; };
#ifndef FORGE_EMU_NO_ADDRESS_SPACES
template <class T> struct strip_as<device T> { typedef T type; };
template <class T> struct strip_as<threadgroup T> { typedef T type; };
template <class T> struct strip_as<constant T> { typedef T type; };
template <class T> struct strip_as<const device T> { typedef T type; };
template <class T> struct strip_as<const threadgroup T> { typedef T type; };
template <class T> struct strip_as<const constant T> { typedef T type; };
#endif
}  // namespace tensor_detail

// dextents<IndexType, Rank>: every extent dynamic.
template <class IndexType, size_t Rank> using dextents = typename tensor_detail::dext<IndexType, Rank>::type;

// ---- tensors -----------------------------------------------------------------------
struct tensor_inline {};
struct tensor_handle {};
struct tensor_offset {};

template <class ElementType, class Extents, class Descriptor = tensor_handle, class... Tags> struct tensor {
    static_assert(::forge_emu::same<Descriptor, tensor_inline>::v,
                  "metal-emu: only tensor_inline tensors (built in the kernel from a pointer) are emulated");
};

// tensor<ElementType, Extents, tensor_inline>: a view of memory the kernel
// already has. Element (x0, x1, …) is at data + Σ xi·stride(i); without
// strides the tensor is packed with axis 0 innermost.
template <class ElementType, class Extents> struct tensor<ElementType, Extents, tensor_inline> {
    typedef ElementType element_type;
    typedef typename tensor_detail::strip_as<ElementType>::type value_type;
    typedef Extents extents_type;
    typedef typename Extents::index_type index_type;
    static constexpr size_t forge_rank = Extents::forge_rank;

    ElementType* forge_data;
    Extents forge_ext;
    index_type forge_stride[forge_rank];

    tensor(ElementType* p, Extents e) : forge_data(p), forge_ext(e) {
        index_type s = 1;
        for (size_t r = 0; r < forge_rank; r++) {
            forge_stride[r] = s;
            s *= e.extent(r);
        }
    }
    template <class S>
    tensor(ElementType* p, Extents e, array<S, forge_rank> strides) : forge_data(p), forge_ext(e) {
        for (size_t r = 0; r < forge_rank; r++) forge_stride[r] = (index_type)strides[r];
    }

    static constexpr size_t get_rank() { return forge_rank; }
    Extents get_extents() const { return forge_ext; }
    Extents extents() const { return forge_ext; }
    index_type get_extent(size_t r) const { return forge_ext.extent(r); }
    index_type get_stride(size_t r) const { return forge_stride[r]; }
    ElementType* get_data() const { return forge_data; }

    // forge_at is the address of element (x, y) of a rank-2 tensor.
    ElementType* forge_at(long x, long y) const { return forge_data + x * (long)forge_stride[0] + y * (long)forge_stride[1]; }

    // slice(i…): the origin moved to i; the extents are what remains of
    // the original tensor's from there (so bounds stay those of the
    // original). slice<E…>(i…): the same with the static extents E
    // (dynamic_extent keeps what remains).
    template <size_t... SE, class... I,
              class = typename ::forge_emu::enable_if<sizeof...(I) == forge_rank && (sizeof...(SE) == forge_rank || sizeof...(SE) == 0)>::type>
    auto slice(I... idx) const {
        const long o[] = {(long)idx...};
        long off = 0;
        index_type rem[forge_rank];
        for (size_t r = 0; r < forge_rank; r++) {
            if (o[r] < 0) forge_rt_fault("metal-emu: tensor slice at a negative coordinate", __builtin_FILE(), __builtin_LINE());
            off += o[r] * (long)forge_stride[r];
            const long left = (long)forge_ext.extent(r) - o[r];
            rem[r] = (index_type)(left > 0 ? left : 0);
        }
        if constexpr (sizeof...(SE) == 0) {
            Extents e;
            for (size_t r = 0; r < forge_rank; r++) e.forge_e[r] = rem[r];
            tensor t(forge_data + off, e);
            for (size_t r = 0; r < forge_rank; r++) t.forge_stride[r] = forge_stride[r];
            return t;
        } else {
            typedef metal::extents<index_type, SE...> X;
            X e;
            for (size_t r = 0; r < forge_rank; r++)
                e.forge_e[r] = X::static_extent(r) == dynamic_extent ? rem[r] : (index_type)X::static_extent(r);
            tensor<ElementType, X, tensor_inline> t(forge_data + off, e);
            for (size_t r = 0; r < forge_rank; r++) t.forge_stride[r] = forge_stride[r];
            return t;
        }
    }
};

template <class E, class X> tensor(E*, X) -> tensor<E, X, tensor_inline>;
template <class E, class X, class S, size_t N> tensor(E*, X, array<S, N>) -> tensor<E, X, tensor_inline>;

template <class T> struct is_tensor_inline { static constexpr bool value = false; };
template <class E, class X> struct is_tensor_inline<tensor<E, X, tensor_inline>> { static constexpr bool value = true; };
template <class T> constexpr bool is_tensor_inline_v = is_tensor_inline<T>::value;

// ---- execution scopes -----------------------------------------------------------------
template <size_t N> struct execution_simdgroups {
    static_assert(N != 0, "execution_simdgroups<0>");
    static constexpr size_t static_size = N;
    constexpr uint size() const { return (uint)N; }
};
template <size_t N> struct execution_threads {
    static_assert(N == 1, "only execution_threads<1> exists");
    static constexpr size_t static_size = N;
    constexpr uint size() const { return 1; }
};
using execution_simdgroup = execution_simdgroups<1>;
using execution_thread = execution_threads<1>;

// ---- cooperative tensors ------------------------------------------------------------------
namespace tensor_detail {
// forge_simd_self is a simd rendezvous whose result, in every active lane,
// is the simdgroup's exchange area (one per simdgroup, in simdgroup order)
// and the mask of the lanes that met.
struct simd_self {
    forge_simd_x* x;
    unsigned active;
};
inline void op_simd_self(forge_simd_x* x) {
    for (int l = 0; l < FORGE_SIMD_WIDTH; l++) {
        if (!(x->active & (1u << l))) continue;
        simd_self s{x, x->active};
        __builtin_memcpy(x->out[l], &s, sizeof s);
    }
}
inline simd_self simd_meet(const char* file, unsigned line) {
    simd_self s;
    __builtin_memcpy(&s, forge_rt_simd(nullptr, 0, 0, op_simd_self, file, line), sizeof s);
    return s;
}
}  // namespace tensor_detail
}  // namespace metal

// forge_emu_tensor_site is the threadgroup-memory site the generator
// reserves for the tensor ops (the kernel table defines it).
extern "C" const int forge_emu_tensor_site;

namespace metal {
namespace tensor_detail {
// scope_thread is a rendezvous of an execution scope of S simdgroups (the
// whole threadgroup when S > 1: Apple requires execution_simdgroups<N> to
// span the threadgroup) that returns the calling thread's index in it. It
// faults unless every lane of the simdgroup is there and, for S > 1, the
// threadgroup has S simdgroups and all of its threads are there (a
// threadgroup barrier counted twice: the runtime lets a barrier pass once
// every thread that has not returned arrived). Simdgroups are numbered by
// their exchange areas, which the runtime keeps in simdgroup order: the
// smallest address any thread of the threadgroup saw is simdgroup 0's.
template <size_t S> inline unsigned scope_thread(const char* file, unsigned line) {
    const unsigned at = line & 0xfffff;  // forge_rt_fault takes the bare line
    const simd_self me = simd_meet(file, line);
    const unsigned lane = forge_rt_lane();
    if (me.x->nlanes != 32 || me.active != 0xffffffffu)
        forge_rt_fault("metal-emu: a tensor op's execution scope is not uniform: not every lane of the simdgroup took part "
                       "(or the simdgroup is not full)", file, at);
    if constexpr (S == 1) {
        return lane;
    } else {
        // Fresh threadgroup memory is all 0xff bytes: the largest pointer,
        // so min needs no reset (the maximum is kept as min(~p)), and the
        // arrival count starts at −1.
        unsigned long* ex = (unsigned long*)forge_rt_tg_slot((unsigned)forge_emu_tensor_site, 3 * sizeof(unsigned long),
                                                             alignof(unsigned long), file, line);
        const unsigned long p = (unsigned long)me.x;
        if (p < ex[0]) ex[0] = p;
        if (~p < ex[1]) ex[1] = ~p;
        ex[2]++;
        forge_rt_barrier(file, line);
        const unsigned long lo = ex[0], hi = ~ex[1];
        const unsigned long nsg = (hi - lo) / sizeof(forge_simd_x) + 1;
        if (nsg != S)
            forge_rt_fault("metal-emu: a tensor op of execution_simdgroups<N> runs in a threadgroup of another number of "
                           "simdgroups (Apple: undefined behaviour)", file, at);
        if ((ex[2] + 1) % (32 * S) != 0)
            forge_rt_fault("metal-emu: a tensor op's execution scope is not uniform: not every thread of the threadgroup "
                           "reached it", file, at);
        forge_rt_barrier(file, line);  // no thread counts its next arrival before every thread checked this one
        return (unsigned)((p - lo) / sizeof(forge_simd_x)) * 32u + lane;
    }
}
}  // namespace tensor_detail

// cooperative_tensor<ElementType, Extents, Layout>: a Rows × Cols tile
// spread over the T threads of an execution scope. Layout is the
// emulator's: element e of the tile (row-major, e = row·Cols + col) lives
// in thread e mod T, slot e / T; each thread has one slot more, never
// valid. Only the destination tensors of matmul2d are emulated.
template <class ElementType, class Extents, class Layout> struct cooperative_tensor {
    typedef ElementType element_type;
    typedef ElementType value_type;
    static constexpr int Rows = Layout::rows, Cols = Layout::cols;
    static constexpr unsigned T = Layout::threads;
    static constexpr unsigned Used = (unsigned)((Rows * Cols + T - 1) / T);
    static constexpr unsigned Capacity = Used + 1;

    ElementType forge_v[Capacity];
    unsigned forge_tid;  // the owning thread's index in the scope

    static constexpr uint16_t get_capacity() { return (uint16_t)Capacity; }
    uint16_t capacity() const { return (uint16_t)Capacity; }
    bool is_valid_element(uint16_t i) const { return i < Used && forge_tid + i * T < (unsigned)(Rows * Cols); }
    // get_multidimensional_index(i) is element i's coordinates in the tile:
    // [0] the column (x), [1] the row (y).
    array<typename Layout::coord_type, 2> get_multidimensional_index(uint16_t i) const {
        if (!is_valid_element(i)) return {{0, 0}};
        const unsigned e = forge_tid + i * T;
        return {{(typename Layout::coord_type)(e % Cols), (typename Layout::coord_type)(e / Cols)}};
    }
    thread ElementType& operator[](uint16_t i) { return forge_v[i]; }
    const thread ElementType& operator[](uint16_t i) const { return forge_v[i]; }

    // load / store move the tile from / to a rank-2 tensor (x = column,
    // y = row), inside its extents only.
    template <class Tn> void load(thread const Tn& t) {
        for (unsigned i = 0; i < Capacity; i++) {
            if (!is_valid_element((uint16_t)i)) continue;
            const auto ix = get_multidimensional_index((uint16_t)i);
            if (ix[0] < (long)t.get_extent(0) && ix[1] < (long)t.get_extent(1))
                forge_v[i] = (ElementType)(float)*t.forge_at(ix[0], ix[1]);
        }
    }
    template <class Tn> void store(thread const Tn& t) const {
        typedef typename Tn::value_type V;
        for (unsigned i = 0; i < Capacity; i++) {
            if (!is_valid_element((uint16_t)i)) continue;
            const auto ix = get_multidimensional_index((uint16_t)i);
            if (ix[0] < (long)t.get_extent(0) && ix[1] < (long)t.get_extent(1)) *t.forge_at(ix[0], ix[1]) = (V)forge_v[i];
        }
    }
};

namespace tensor_detail {
// coop_layout is the emulator's layout tag of a Rows × Cols cooperative
// tensor over the Threads threads of a scope.
template <int R, int C, unsigned Threads, class Coord> struct coop_layout {
    static constexpr int rows = R, cols = C;
    static constexpr unsigned threads = Threads;
    typedef Coord coord_type;
};
}  // namespace tensor_detail
}  // namespace metal

// ---- MetalPerformancePrimitives ------------------------------------------------------
// Apple's MetalPerformancePrimitives tensor ops (MSL 4.0, macOS 26):
// mpp::tensor_ops::matmul2d_descriptor and matmul2d<Descriptor, Scope> with
// run(left, right, destination) over tensor_inline operands (see
// <metal_tensor>) and a tensor or cooperative-tensor destination, and
// get_destination_cooperative_tensor().
//
// Semantics, as MPPTensorOpsMatMul2d.h documents them:
//   - destination = left · right (mode::multiply) or destination +
//     left · right (mode::multiply_accumulate), on an m × n tile of the
//     destination at its origin, with left m × K and right K × n;
//   - transpose_left: left is stored K-major (its x axis runs down the
//     rows: extents (m, K)), else extents (K, m); transpose_right: right's
//     extents are (K, n), else (n, K);
//   - k = dynamic (the descriptor's default): K is read from the operands'
//     extents (they must agree); a static k reads k columns, which the
//     operands must have;
//   - edges are checked against the operands' extents: rows of left and
//     columns of right beyond them contribute nothing, and a tensor
//     destination is written only inside its extents;
//   - every thread of the execution scope (execution_simdgroups<N>: N
//     whole simdgroups, which must be the whole threadgroup;
//     execution_simdgroup: one simdgroup) calls run, and the scope may
//     synchronise inside it.
//
// The emulator: run (and get_destination_cooperative_tensor) rendezvous the
// scope — threadgroup barriers for N > 1, a simd rendezvous for one
// simdgroup — faulting when not every thread of the scope takes part or the
// threadgroup has another number of simdgroups; then each thread computes
// the tile elements it owns (its cooperative-tensor elements, or the same
// share of a tensor destination), each element in float32 as a chain of
// fma over k = 0 … K−1 starting from the destination's value
// (mode::multiply_accumulate) or 0. relaxed_precision is ignored (the
// result is the exact-order float32 one). A cooperative destination's
// elements outside the operands' rows or columns become NaN (their value is
// not specified on the GPU). The element types are checked against the
// combinations Apple's header lists for half, bfloat and float.

namespace mpp {
namespace tensor_ops {

template <class T> struct dynamic_length {
    static constexpr T value = metal::numeric_limits<T>::max();
};
template <class T> constexpr T dynamic_length_v = dynamic_length<T>::value;

struct matmul2d_descriptor {
    enum class mode { multiply, multiply_accumulate };
    int m, n, k;
    bool transpose_left, transpose_right;
    bool relaxed_precision;
    mode matmul_mode;
    constexpr matmul2d_descriptor(int m_, int n_, int k_ = static_cast<int>(metal::dynamic_extent), bool tl = false,
                                  bool tr = false, bool relaxed = false, mode md = mode::multiply)
        : m(m_), n(n_), k(k_), transpose_left(tl), transpose_right(tr), relaxed_precision(relaxed), matmul_mode(md) {}
};

namespace forge_detail {
using ::forge_emu::same;

// Both sentinels Apple's headers have used for "read K from the operands".
constexpr bool dynamic_k(int k) { return k == static_cast<int>(metal::dynamic_extent) || k == dynamic_length_v<int>; }

template <class T> struct is_tensor { static constexpr bool v = false; };
template <class E, class X> struct is_tensor<metal::tensor<E, X, metal::tensor_inline>> { static constexpr bool v = true; };
template <class T> struct is_coop { static constexpr bool v = false; };
template <class E, class X, class L> struct is_coop<metal::cooperative_tensor<E, X, L>> { static constexpr bool v = true; };

template <class S> struct scope_info { static constexpr bool v = false; };
template <size_t N> struct scope_info<metal::execution_simdgroups<N>> {
    static constexpr bool v = true;
    static constexpr unsigned threads = 32 * (unsigned)N;
    static constexpr unsigned simdgroups = (unsigned)N;
};
template <> struct scope_info<metal::execution_threads<1>> {
    static constexpr bool v = true;
    static constexpr unsigned threads = 1;
    static constexpr unsigned simdgroups = 0;
};

// The (left, right, destination) element types of Apple's table among
// half, bfloat and float.
template <class L, class R, class D> constexpr bool supported() {
    constexpr bool h = same<L, half>::v, b = same<L, bfloat>::v, f = same<L, float>::v;
    constexpr bool rh = same<R, half>::v, rb = same<R, bfloat>::v, rf = same<R, float>::v;
    constexpr bool dh = same<D, half>::v, db = same<D, bfloat>::v, df = same<D, float>::v;
    if (!(h || b || f) || !(rh || rb || rf) || !(dh || db || df)) return false;
    if (df) return true;                      // every pair into float
    if (f || rf) return false;                // a float operand needs a float destination
    if (h && rh) return dh;                   // half × half → half
    if (b && rb) return db;                   // bfloat × bfloat → bfloat
    return true;                              // half × bfloat, bfloat × half → half or bfloat
}

template <class Scope> inline unsigned scope_thread(const char* file, unsigned line) {
    if constexpr (scope_info<Scope>::simdgroups == 0) {
        return 0;
    } else {
        return metal::tensor_detail::scope_thread<scope_info<Scope>::simdgroups>(file, line);
    }
}
}  // namespace forge_detail

template <matmul2d_descriptor Descriptor, class Scope, class... Args> class matmul2d {
    static_assert(forge_detail::scope_info<Scope>::v, "Scope template argument should be of op_scope type");
    static_assert(Descriptor.m > 0 && Descriptor.n > 0, "matmul2d: the tile needs m, n > 0");
    static constexpr unsigned T = forge_detail::scope_info<Scope>::threads;

public:
    static constexpr matmul2d_descriptor descriptor = Descriptor;
    using scope = Scope;

    template <class LeftOperand, class RightOperand, class ElementType, class CoordType = int, class... CoopArgs>
    using cooperative_tensor_destination_t =
        metal::cooperative_tensor<ElementType, metal::dextents<CoordType, 2>,
                                  metal::tensor_detail::coop_layout<Descriptor.m, Descriptor.n, T, CoordType>>;

    // get_destination_cooperative_tensor returns this thread's share of an
    // m × n destination tile, every element NaN (initialise it before
    // run with mode::multiply_accumulate). Every thread of the scope calls it.
    template <class LeftOperand, class RightOperand, class ElementType, class CoordType = int, class... CoopArgs>
    cooperative_tensor_destination_t<LeftOperand, RightOperand, ElementType, CoordType> get_destination_cooperative_tensor(
        FORGE_SITE) const {
        static_assert(forge_detail::is_tensor<LeftOperand>::v && forge_detail::is_tensor<RightOperand>::v,
                      "metal-emu: matmul2d: the operands must be tensor_inline tensors");
        cooperative_tensor_destination_t<LeftOperand, RightOperand, ElementType, CoordType> ct;
        ct.forge_tid = forge_detail::scope_thread<Scope>(forge_file, forge_line);
        for (unsigned i = 0; i < ct.Capacity; i++) ct.forge_v[i] = (ElementType)__builtin_nanf("");
        return ct;
    }

    template <class L, class R, class D> void run(thread L& left, thread R& right, thread D& destination, FORGE_SITE) const {
        static_assert(forge_detail::is_tensor<L>::v && forge_detail::is_tensor<R>::v,
                      "metal-emu: matmul2d: the operands must be tensor_inline tensors");
        static_assert(forge_detail::is_tensor<D>::v || forge_detail::is_coop<D>::v,
                      "matmul2d: the destination is a tensor or a cooperative tensor");
        static_assert(L::forge_rank == 2 && R::forge_rank == 2, "matmul2d: rank-2 operands");
        typedef typename L::value_type LT;
        typedef typename R::value_type RT;
        typedef typename D::value_type DT;
        static_assert(forge_detail::supported<LT, RT, DT>(), "matmul2d: unsupported element type combination");
        constexpr matmul2d_descriptor d = Descriptor;
        constexpr bool acc = d.matmul_mode == matmul2d_descriptor::mode::multiply_accumulate;

        // The scope meets (and is checked) at every run.
        [[maybe_unused]] const unsigned tid = forge_detail::scope_thread<Scope>(forge_file, forge_line);

        // Left is m × K: rows along y unless transposed; right is K × n.
        const long lk = d.transpose_left ? (long)left.get_extent(1) : (long)left.get_extent(0);
        const long lrows = d.transpose_left ? (long)left.get_extent(0) : (long)left.get_extent(1);
        const long rk = d.transpose_right ? (long)right.get_extent(0) : (long)right.get_extent(1);
        const long rcols = d.transpose_right ? (long)right.get_extent(1) : (long)right.get_extent(0);
        long K;
        if (forge_detail::dynamic_k(d.k)) {
            if (lk != rk) forge_rt_fault("metal-emu: matmul2d: the operands' K extents differ", forge_file, forge_line & 0xfffff);
            K = lk;
        } else {
            K = d.k;
            if (lk < K || rk < K) forge_rt_fault("metal-emu: matmul2d: a static k beyond an operand's extent", forge_file, forge_line & 0xfffff);
        }
        auto lv = [&](long r, long kk) -> float {
            return d.transpose_left ? (float)*left.forge_at(r, kk) : (float)*left.forge_at(kk, r);
        };
        auto rv = [&](long kk, long c) -> float {
            return d.transpose_right ? (float)*right.forge_at(kk, c) : (float)*right.forge_at(c, kk);
        };
        auto dot = [&](long r, long c, float s) -> float {
            for (long kk = 0; kk < K; kk++) s = __builtin_fmaf(lv(r, kk), rv(kk, c), s);
            return s;
        };

        if constexpr (forge_detail::is_coop<D>::v) {
            static_assert(D::Rows == d.m && D::Cols == d.n && D::T == T,
                          "matmul2d: the cooperative destination comes from another operation");
            for (unsigned i = 0; i < D::Capacity; i++) {
                if (!destination.is_valid_element((uint16_t)i)) continue;
                const auto ix = destination.get_multidimensional_index((uint16_t)i);
                const long r = ix[1], c = ix[0];
                if (r >= lrows || c >= rcols) {
                    destination.forge_v[i] = (DT)__builtin_nanf("");
                    continue;
                }
                destination.forge_v[i] = (DT)dot(r, c, acc ? (float)destination.forge_v[i] : 0.0f);
            }
        } else {
            // A tensor destination: this thread's share of the tile, as a
            // cooperative tensor of the scope would hold it.
            const long drows = (long)destination.get_extent(1), dcols = (long)destination.get_extent(0);
            for (unsigned e = tid; e < (unsigned)(d.m * d.n); e += T) {
                const long r = e / d.n, c = e % d.n;
                if (r >= drows || c >= dcols) continue;
                thread auto* out = destination.forge_at(c, r);
                const float s0 = acc ? (float)*out : 0.0f;
                *out = (DT)(r < lrows && c < rcols ? dot(r, c, s0) : s0);
            }
        }
    }
};

}  // namespace tensor_ops
}  // namespace mpp
