"""Mathematics Dataset modules as the published generator draws them: linear_1d,
differentiate, sort, collect, and add_or_sub (``number_sampling="generator"``).

Each module is a function ``(rng, entropy) -> (question, answer)``, re-implemented from the
rules of the published generator (Saxton et al. 2019): its question templates, how it spends
the entropy (decimal digits of randomness), its number kinds and its answer formatting. Only
the pure (non-composed) variants: no ``Let x = ...`` contexts. All randomness comes from
numpy's ``rng``, so the data follow from ``data_seed``. Where the generator prints a sympy
expression (differentiate's polynomial, the differentiate and collect answers),
:func:`polynomial_text` writes it as sympy's ``str`` does (``30595*j**4 + 254*j**3 + 1559873``)
without building it in sympy, which is slow; the tests check the two agree.
"""

from __future__ import annotations

import math
import string
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

# variable names: lower-case letters but e (the generator's util/composition.py)
LETTERS = tuple(c for c in string.ascii_lowercase if c != "e")
SORT_TEMPLATES = ("Sort {values} in {direction} order.", "Put {values} in {direction} order.",
                  "Sort {values}.")
DIFFERENTIATE_TEMPLATES = ("Find the {nth} derivative of {eq} wrt {var}.",
                           "What is the {nth} derivative of {eq} wrt {var}?",
                           "Differentiate {eq} with respect to {var}.", "Differentiate {eq} wrt {var}.",
                           "What is the derivative of {eq} wrt {var}?",
                           "Find the {nth} derivative of {eq}.", "What is the {nth} derivative of {eq}?",
                           "Differentiate {eq}.", "What is the derivative of {eq}?")
LINEAR_1D_TEMPLATE = "Solve {equation} for {variable}."
COLLECT_TEMPLATE = "Collect the terms in {polynomial}."
ORDINALS = ("first", "second", "third")
DIRECTIONS = {True: ("ascending", "increasing"), False: ("descending", "decreasing")}
# comparison.py: a sort question lists 3 to 3 + int(entropy / 2) numbers; sort_more (its
# extrapolation) 1 or 2 more than the most in training (entropy 10)
SORT_MORE_COUNTS = (3 + 10 // 2 + 1, 3 + 10 // 2 + 2)


def randint(rng: np.random.Generator, low: int, high: int) -> int:
    """An integer uniform in [low, high], both included (any size: split terms can pass 10**18)."""
    if high - low < 2 ** 62:
        return int(rng.integers(low, high + 1))
    size = high - low + 1
    while (value := int.from_bytes(rng.bytes(size.bit_length() // 8 + 1), "little")
           >> (8 - size.bit_length() % 8)) >= size:
        pass
    return low + value


def coin(rng: np.random.Generator) -> bool:
    return bool(rng.random() < 0.5)


def integer(rng: np.random.Generator, entropy: float, signed: bool, min_abs: int = 0,
            coprime_to: int = 1) -> int:
    """An integer from about 10**entropy values, as the generator's sample/number.py
    ``integer``: uniform in [-m, m] with m = ceil(size / 2) if ``signed``, else in
    [min_abs, size], redrawn until |value| >= min_abs and it is coprime to ``coprime_to``."""
    size = 10.0 ** entropy + min_abs
    coprime_to = abs(coprime_to)
    if coprime_to >= 2:  # more values, so that the coprime ones still number about 10**entropy
        import sympy  # here, not at the top: every command loads the tasks, few draw rationals

        size = size / math.prod(1 - 1 / p for p in sympy.primefactors(coprime_to)) + 1
    low, high = (-math.ceil(size / 2), math.ceil(size / 2)) if signed else (min_abs, math.ceil(size))
    while True:
        value = randint(rng, low, high)
        if abs(value) >= min_abs and math.gcd(value, coprime_to) == 1:
            return value


def non_integer_rational(rng: np.random.Generator, entropy: float, signed: bool) -> Fraction:
    """numerator / denominator in lowest terms, denominator >= 2, the entropy split at random
    between them (sample/number.py)."""
    numerator_entropy = rng.uniform(0, entropy)
    numerator = integer(rng, numerator_entropy, signed, min_abs=1)
    denominator = integer(rng, entropy - numerator_entropy, False, min_abs=2, coprime_to=numerator)
    return Fraction(numerator, denominator)


def non_integer_decimal(rng: np.random.Generator, entropy: float, signed: bool) -> Fraction:
    """An integer divided by 10**shift (shift 1..ceil(entropy)) that is not an integer."""
    while True:
        base = integer(rng, entropy, signed)
        divisor = 10 ** randint(rng, 1, math.ceil(entropy))
        if base % divisor != 0:
            return Fraction(base, divisor)


def decimal_text(value: Fraction) -> str:
    """A terminating fraction in plain decimal notation: -3/20 -> -0.15 (exact at any size)."""
    with localcontext() as context:
        context.prec = len(str(value.numerator)) + len(str(value.denominator)) + 2
        return format(Decimal(value.numerator) / Decimal(value.denominator), "f")


def sort_numbers(rng: np.random.Generator, entropies: np.ndarray, only_integers: bool
                 ) -> list[tuple[Fraction | int, str]]:
    """(value, text) of the numbers of a sort question: comparison.py draws integers or, when
    not ``only_integers``, an integer or decimal (1/2 each) or an integer or rational (1/2
    each), so integers half the time. The integers are drawn at once (entropy up to 18)."""
    half = np.ceil(10.0 ** entropies / 2).astype(np.int64)  # integer(entropy, signed=True)
    integers = rng.integers(-half, half + 1)
    kinds = [0] * len(entropies) if only_integers else rng.integers(0, 4, len(entropies)).tolist()
    numbers: list[tuple[Fraction | int, str]] = []
    for value, kind, entropy in zip(integers.tolist(), kinds, entropies.tolist()):
        if kind == 2:
            fraction = non_integer_decimal(rng, entropy, True)
            numbers.append((fraction, decimal_text(fraction)))
        elif kind == 3:
            fraction = non_integer_rational(rng, entropy, True)
            numbers.append((fraction, f"{fraction.numerator}/{fraction.denominator}"))
        else:
            numbers.append((value, str(value)))
    return numbers


def sort_example(rng: np.random.Generator, entropy: float, count: int | None = None
                 ) -> tuple[str, str]:
    """``Sort -2, 0.4, 1/3 in decreasing order.`` -> ``0.4, 1/3, -2`` (modules/comparison.py
    sort): distinct numbers, each with a Dirichlet share (at least 1) of the entropy; only
    integers half the time."""
    count = randint(rng, 3, 3 + int(entropy / 2)) if count is None else count
    only_integers = coin(rng)
    for _ in range(1000):
        entropies = np.maximum(1, entropy * rng.dirichlet(np.ones(count)))
        numbers = sort_numbers(rng, entropies, only_integers)
        if len({value for value, _ in numbers}) == count:
            break
    else:
        raise ValueError(f"no {count} distinct numbers with entropy {entropy}")
    ascending = coin(rng)
    templates = SORT_TEMPLATES if ascending else SORT_TEMPLATES[:2]  # "Sort x, y." is ascending
    direction = DIRECTIONS[ascending][randint(rng, 0, 1)]
    template = templates[randint(rng, 0, len(templates) - 1)]
    question = template.format(values=", ".join(text for _, text in numbers), direction=direction)
    ordered = sorted(numbers, key=lambda number: number[0], reverse=not ascending)
    return question, ", ".join(text for _, text in ordered)


# modules/arithmetic.py: _add_question_or_entity's and _sub_question_or_entity's templates;
# the four "distance" / "difference" ones only when p >= q (the answer p - q is then |p - q|)
ADD_SUB_ADD_TEMPLATES = ("{p} + {q}", "{p}+{q}", "Work out {p} + {q}.", "Add {p} and {q}.",
                         "Put together {p} and {q}.", "Sum {p} and {q}.", "Total of {p} and {q}.",
                         "Add together {p} and {q}.", "What is {p} plus {q}?",
                         "Calculate {p} + {q}.", "What is {p} + {q}?")
ADD_SUB_SUB_TEMPLATES = ("{p} - {q}", "Work out {p} - {q}.", "What is {p} minus {q}?",
                         "What is {p} take away {q}?", "What is {q} less than {p}?",
                         "Subtract {q} from {p}.", "Calculate {p} - {q}.", "What is {p} - {q}?")
ADD_SUB_DISTANCE_TEMPLATES = tuple(f"What is the {adjective} between {pair}?"
                                   for adjective in ("distance", "difference")
                                   for pair in ("{p} and {q}", "{q} and {p}"))


def integer_or_decimal(rng: np.random.Generator, entropy: float) -> Fraction:
    """sample/number.py ``integer_or_decimal(entropy, signed=True)``: a signed integer or a
    non-integer decimal, 1/2 each."""
    if coin(rng):
        return Fraction(integer(rng, entropy, True))
    return non_integer_decimal(rng, entropy, True)


def generator_add_or_sub_example(rng: np.random.Generator, entropy: float) -> tuple[str, str]:
    """``What is -0.5 take away 1136?`` -> ``-1136.5`` (modules/arithmetic.py add_or_sub,
    pure): addition or subtraction 1/2 each; p gets an entropy uniform in [0, entropy] (at
    least 1), q the rest (at least 1); each is an integer or a decimal."""
    is_addition = coin(rng)
    entropy_p = max(1.0, rng.uniform(0, entropy))
    entropy_q = max(1.0, entropy - entropy_p)
    p, q = integer_or_decimal(rng, entropy_p), integer_or_decimal(rng, entropy_q)
    if is_addition:
        templates, answer = ADD_SUB_ADD_TEMPLATES, p + q
    else:
        templates = ADD_SUB_SUB_TEMPLATES + (ADD_SUB_DISTANCE_TEMPLATES if p >= q else ())
        answer = p - q
    template = templates[randint(rng, 0, len(templates) - 1)]
    return template.format(p=decimal_text(p), q=decimal_text(q)), decimal_text(answer)


def sort_more_example(rng: np.random.Generator, entropy: float) -> tuple[str, str]:
    """comparison.py's extrapolation ``sort_more``: 9 or 10 numbers (the generator's limit of
    30 characters per answer keeps about 1 in 200: nine small integers)."""
    return sort_example(rng, entropy, count=randint(rng, *SORT_MORE_COUNTS))


def integers_with_sum(rng: np.random.Generator, value: int, count: int, entropy: float) -> list[int]:
    """``count`` integers that sum to ``value`` (sample/polynomials.py): random signed terms,
    the remainder shared out equally, then shuffled."""
    if count <= 1:
        return [value] * count
    entropy *= count / (count - 1)  # (1, 1) and (2, 2) give the same terms after the correction
    min_entropy = max(1, math.log10(5 * abs(-(-value // count)) + 1))
    entropies = np.maximum(min_entropy, entropy * rng.dirichlet(np.ones(count)))
    terms = [integer(rng, e, True) for e in entropies]
    delta = value - sum(terms)
    terms = [term + (delta + i) // count for i, term in enumerate(terms)]
    return [terms[i] for i in rng.permutation(count)]


def non_negative_integers_with_sum(rng: np.random.Generator, count: int, total: int) -> list[int]:
    """Uniform among the ways to write ``total`` as ``count`` ordered integers >= 0."""
    cuts = sorted(int(c) for c in rng.choice(np.arange(1, total + count), count - 1, replace=False))
    return [right - left - 1 for left, right in zip([0, *cuts], [*cuts, total + count])]


def term_counts(rng: np.random.Generator, length: int, is_zero: list[bool]) -> list[int]:
    """How many terms each coefficient is written as, ``length`` in all: one or more per
    non-zero coefficient, none or at least two per zero one (sample/polynomials.py)."""
    counts = [0 if zero else 1 for zero in is_zero]
    counts = [c + e for c, e in zip(counts, non_negative_integers_with_sum(rng, len(counts),
                                                                           length - sum(counts)))]
    while bad := [i for i, zero in enumerate(is_zero) if zero and counts[i] == 1]:
        take = bad[randint(rng, 0, len(bad) - 1)]
        to = [i for i, c in enumerate(counts) if c >= 1 and i != take]
        counts[take] -= 1
        counts[to[randint(rng, 0, len(to) - 1)]] += 1
    return counts


def split_coefficients(rng: np.random.Generator, coefficients: list[int], entropy: float,
                       length: int) -> list[list[int]]:
    """Each coefficient written as a list of integers summing to it, ``length`` in all; the
    entropy shared by Dirichlet weights (count - 1) between the coefficients."""
    counts = term_counts(rng, length, [c == 0 for c in coefficients])
    entropies = entropy * rng.dirichlet(np.maximum(1e-9, np.array(counts) - 1))
    return [integers_with_sum(rng, c, n, e) for c, n, e in zip(coefficients, counts, entropies)]


def monomial(coefficient: int, variable: str, power: int) -> tuple[bool, str]:
    """(negative, text without sign): ``3*x**2``, ``x``, ``7``; a coefficient of 1 is left
    out, 0 is kept (``0*x``), as the generator's sample/polynomials.py monomial."""
    parts = [variable if power == 1 else f"{variable}**{power}"] if power else []
    if not parts or abs(coefficient) != 1:
        parts.insert(0, str(abs(coefficient)))
    return coefficient < 0, "*".join(parts)


def sum_text(terms: list[tuple[bool, str]]) -> str:
    """``-a + b - c`` of signed terms, ``0`` if there are none (sample/ops.py Add)."""
    if not terms:
        return "0"
    text = ""
    for i, (negative, term) in enumerate(terms):
        text += ("-" if negative else "") + term if i == 0 else (" - " if negative else " + ") + term
    return text


def linear_1d_example(rng: np.random.Generator, entropy: float) -> tuple[str, str]:
    """``Solve 0 = 4*b + 3*b + 21 for b.`` -> ``-3`` (modules/algebra.py linear_1d, via
    sample/linear_system.py): a quarter of the entropy (at least 1) for the integer solution,
    a share U(1/3, 2/3) of the rest for the coefficient a != 0 of a*x = a*solution, the
    remainder to write a and a*solution as sums of several terms, each term on the left or,
    negated, on the right."""
    solution_entropy = max(1.0, entropy / 4)
    solution = integer(rng, solution_entropy, True)
    entropy = max(1.0, entropy - solution_entropy)
    variable = LETTERS[randint(rng, 0, len(LETTERS) - 1)]
    matrix_share = rng.uniform(1 / 3, 2 / 3)
    coefficient = 0
    while coefficient == 0:  # invertible
        coefficient = integer(rng, max(1.0, entropy * matrix_share), True)
    values = [coefficient, coefficient * solution]
    min_length = np.count_nonzero(values) + 1
    length = randint(rng, min_length, max(min_length, 1 + int(1 + entropy / 2)))
    x_terms, constant_terms = split_coefficients(rng, values, (1 - matrix_share) * entropy, length)
    monomials = ([monomial(t, variable, 1) for t in x_terms]
                 + [monomial(-t, variable, 0) for t in constant_terms])  # sum of all = 0
    left, right = [], []
    for negative, text in monomials:
        if coin(rng):
            left.append((negative, text))
        else:
            right.append((not negative, text))
    equation = f"{sum_text(left)} = {sum_text(right)}"
    return LINEAR_1D_TEMPLATE.format(equation=equation, variable=variable), str(solution)


def sample_coefficients(rng: np.random.Generator, degrees: list[int], entropy: float
                        ) -> dict[tuple[int, ...], int]:
    """Non-zero integer coefficients {powers: coefficient} of a polynomial in len(degrees)
    variables that reaches each variable's degree; 1 + int(entropy / 2) more terms at most
    than needed for that, the entropy split by Dirichlet weights (sample/polynomials.py)."""
    def random_powers() -> list[int]:
        return [randint(rng, 0, d) for d in degrees]

    powers: dict[tuple[int, ...], None] = {}  # an ordered set
    for i, degree in enumerate(degrees):
        if degree > 0:
            index = random_powers()
            index[i] = degree
            powers[tuple(index)] = None
    most = math.prod(d + 1 for d in degrees)
    low = min(max(1, len(powers)), most)
    high = max(low, min(low + int(entropy / 2), most))
    count = randint(rng, low, high)
    while len(powers) < count:
        powers[tuple(random_powers())] = None
    entropies = entropy * rng.dirichlet(np.ones(count))
    return {index: integer(rng, e, True, min_abs=1) for index, e in zip(powers, entropies)}


def polynomial_text(coefficients: dict[tuple[int, ...], int], names: list[str]) -> str:
    """A polynomial {powers: coefficient} written as sympy prints it (``str``), e.g.
    ``3*x**2*y - 2*x*y**3 + 5``: the terms in lexicographic order of their powers (variables in
    alphabetical order), highest first; a term's variables in alphabetical order; but
    ``5 - 3*x**2`` for a positive number and a negative term in one variable."""
    order = sorted(range(len(names)), key=names.__getitem__)
    items = sorted(((index, c) for index, c in coefficients.items() if c),
                   key=lambda item: [item[0][i] for i in order], reverse=True)
    if (len(items) == 2 and not any(items[1][0]) and items[1][1] > 0 and items[0][1] < 0
            and sum(p > 0 for p in items[0][0]) == 1):
        items.reverse()
    terms = []
    for index, c in items:
        factors = [names[i] if index[i] == 1 else f"{names[i]}**{index[i]}" for i in order if index[i]]
        if abs(c) != 1 or not factors:
            factors.insert(0, str(abs(c)))
        terms.append((c < 0, "*".join(factors)))
    return sum_text(terms)


def differentiate_example(rng: np.random.Generator, entropy: float) -> tuple[str, str]:
    """``Find the second derivative of 2*a**3*b - 5*a wrt a.`` -> ``12*a*b`` (modules/calculus.py
    differentiate): 1-4 variables, degrees 1-3 (0-3 in the variable of the 1st-3rd
    derivative), the entropy less log10(3) for the coefficients of the terms that survive the
    derivative; the terms of lower degree in that variable get the same entropy again."""
    order = randint(rng, 1, 3)
    entropy = max(0.0, entropy - math.log10(3))
    n_variables = randint(rng, 1, 4)
    axis = randint(rng, 0, n_variables - 1)
    degrees = [randint(rng, 1, 3) for _ in range(n_variables)]
    degrees[axis] = randint(rng, 0, 3)
    kept = sample_coefficients(rng, degrees, entropy)
    degrees[axis] = order - 1
    lost = sample_coefficients(rng, degrees, entropy)  # vanish in the derivative
    coefficients = {**lost, **{tuple(p + order * (i == axis) for i, p in enumerate(index)): c
                               for index, c in kept.items()}}
    variables = [LETTERS[i] for i in rng.choice(len(LETTERS), n_variables, replace=False)]
    # d^n/dx^n x**(p + n) = (p + n)! / p! * x**p: the kept terms, shifted back
    derivative = {index: c * math.perm(index[axis] + order, order) for index, c in kept.items()}
    expression = polynomial_text(coefficients, variables)
    templates = DIFFERENTIATE_TEMPLATES[:2 if order > 1 else 5]
    if n_variables == 1:  # "wrt x" may be left out
        templates += DIFFERENTIATE_TEMPLATES[5:7 if order > 1 else 9]
    template = templates[randint(rng, 0, len(templates) - 1)]
    question = template.format(nth=ORDINALS[order - 1], eq=expression, var=variables[axis])
    return question, polynomial_text(derivative, variables)


def collect_example(rng: np.random.Generator, entropy: float) -> tuple[str, str]:
    """``Collect the terms in -2*w + 7*w**2 + 5*w.`` -> ``7*w**2 + 3*w`` (modules/polynomials.py
    collect): a polynomial of degree 1-3 with 2/5 of the entropy (Dirichlet(2, 3) shares), each
    coefficient written as one or more terms (zero ones as none or several), 2 to
    2 + ceil(entropy) // 2 terms more than non-zero coefficients, with the other 3/5,
    shuffled."""
    value_entropy, split_entropy = entropy * rng.dirichlet([2, 3])
    degree = randint(rng, 1, 3)
    sampled = sample_coefficients(rng, [degree], value_entropy)
    coefficients = [sampled.get((power,), 0) for power in range(degree + 1)]
    min_length = np.count_nonzero(coefficients) + 2
    length = randint(rng, min_length, min_length + math.ceil(split_entropy) // 2)
    variable = LETTERS[randint(rng, 0, len(LETTERS) - 1)]
    terms = [(c, power) for power, split in enumerate(split_coefficients(rng, coefficients,
                                                                         split_entropy, length))
             for c in split]
    terms = [terms[i] for i in rng.permutation(len(terms))]
    text = sum_text([monomial(c, variable, power) for c, power in terms])
    if all(abs(c) == 1 and power == 1 for c, power in terms):
        text += " + 0"  # the generator adds a constant when the sum has no number in it
    collected = dict.fromkeys([(power,) for power in range(degree + 1)], 0)
    for c, power in terms:
        collected[(power,)] += c
    return COLLECT_TEMPLATE.format(polynomial=text), polynomial_text(collected, [variable])
