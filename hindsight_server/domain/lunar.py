"""The Chinese calendar, computed: the Gregorian dates of its festivals in any year, with no table.

Pure: standard library only, no I/O. Every result is a date in China Standard Time (UTC+8), the time
the calendar has been reckoned in since 1929; before 1929 it was Beijing's local mean time (116°25' E,
UTC+7:45:40), and so it is here, which is what the published calendar of 1914, 1916 and 1920 needs.

Astronomy, from Jean Meeus, *Astronomical Algorithms*, 2nd ed. (Willmann-Bell, 1998):

* New moons: chapter 49, the mean lunation plus its periodic terms and the 14 planetary arguments
  (within 34 seconds of PyEphem over 1900-2100).
* The Sun's apparent longitude: chapter 25, "higher accuracy": the Earth's heliocentric longitude from
  the truncated VSOP87 series of Appendix III, turned geocentric (+180°), with the FK5 correction,
  the nutation in longitude (chapter 22, its short series) and the aberration; about one arcsecond,
  which is about 25 seconds of time.
* ΔT = TT - UT, to turn the dynamical time of both into civil time: the polynomials of Espenak and
  Meeus, "Five Millennium Canon of Solar Eclipses" (NASA/TP-2006-214141).

Calendar rules, as in the national standard GB/T 33661-2017 《农历的编算和颁行》 (the "true" 定气 rules
in force since 1645):

* A month begins on the day of a new moon; it is 29 or 30 days long.
* The month in which the winter solstice (冬至, the Sun at 270°) falls is month 11.
* A sui (岁) runs from one month 11 to the next. If it has 13 months, the first of them in which no
  principal term (中气: the Sun at a multiple of 30°) falls is a leap month, and takes the number of the
  month before it. A sui of 12 months has no leap month, even if one of its months has no principal
  term; that is what makes 2033 come out right (leap month 11, Spring Festival on January 31).
* Festivals are days of ordinary (not leap) months: 春节 正月初一, 元宵 正月十五, 端午 五月初五,
  七夕 七月初七, 中秋 八月十五, 重阳 九月初九; 除夕 is the last day of the twelfth month, so the eve of
  the Spring Festival. 清明 is the day the Sun reaches 15°.

The festivals of 1900-2100 agree with the published calendar (tests/domain/test_lunar.py says how it
was checked, and the two dates in 2057 and 2097 that seconds decide). Before 1645 the calendar had other
rules, so earlier dates are the modern calendar run backwards; far from now the uncertainty of ΔT lets
an event within minutes of midnight fall on either day. Any year from 2 to 9997 is computed.

A year's months are computed once (under a millisecond) and cached; a festival's date after that is a
cached look-up (about 0.15 µs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, timedelta
from enum import Enum
from functools import lru_cache

__all__ = ["FIRST_YEAR", "LAST_YEAR", "Festival", "LunarMonth", "festival_date", "lunar_year"]

FIRST_YEAR, LAST_YEAR = 2, 9997  # what `datetime.date` can hold with a year to spare either side


class Festival(Enum):
    SPRING_FESTIVAL = "春节"  # 正月初一
    LANTERN = "元宵"  # 正月十五
    DRAGON_BOAT = "端午"  # 五月初五
    QIXI = "七夕"  # 七月初七
    MID_AUTUMN = "中秋"  # 八月十五
    DOUBLE_NINTH = "重阳"  # 九月初九
    NEW_YEARS_EVE = "除夕"  # the last day of 腊月, the eve of the Spring Festival
    QINGMING = "清明"  # the solar term: the Sun at 15°


@dataclass(frozen=True, slots=True)
class LunarMonth:
    number: int  # 1 (正月) .. 12 (腊月)
    leap: bool  # a leap month (闰月), numbered as the month before it
    first_day: date  # 初一, the day of the new moon
    days: int  # 29 or 30


def festival_date(festival: Festival, year: int) -> date:
    """The Gregorian date of `festival` in Gregorian `year` (除夕: the one before that year's 春节)."""
    return _festival_dates(year)[festival]


def lunar_year(year: int) -> tuple[LunarMonth, ...]:
    """The months of the Chinese year that begins in Gregorian `year`: 正月 to 腊月, 12 or 13 of them."""
    _check(year)
    this, following = _sui(year), _sui(year + 1)
    first = next(index for index, month in enumerate(this) if month.number == 1 and not month.leap)
    following_first = next(index for index, month in enumerate(following) if month.number == 1)
    return this[first:] + following[:following_first]


# ---------------------------------------------------------------------------------------------------
# Festivals

_LUNAR_FESTIVALS: dict[Festival, tuple[int, int]] = {  # (month, day) in an ordinary month
    Festival.SPRING_FESTIVAL: (1, 1),
    Festival.LANTERN: (1, 15),
    Festival.DRAGON_BOAT: (5, 5),
    Festival.QIXI: (7, 7),
    Festival.MID_AUTUMN: (8, 15),
    Festival.DOUBLE_NINTH: (9, 9),
}
_QINGMING_LONGITUDE = 15.0
_CACHED_YEARS = 512  # the parser looks at a few years around now; a year's festivals are 8 dates


def _check(year: int) -> None:
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise ValueError(f"the Chinese calendar is computed for years {FIRST_YEAR}-{LAST_YEAR}, not {year}")


@lru_cache(maxsize=_CACHED_YEARS)
def _festival_dates(year: int) -> dict[Festival, date]:
    _check(year)
    # Months 1..10 each appear once as an ordinary month in the sui that ends in `year` (11 and 12 of
    # the year before open it).
    firsts = {month.number: month.first_day for month in _sui(year) if not month.leap}
    dates = {
        festival: firsts[number] + timedelta(days=day - 1)
        for festival, (number, day) in _LUNAR_FESTIVALS.items()
    }
    dates[Festival.NEW_YEARS_EVE] = dates[Festival.SPRING_FESTIVAL] - timedelta(days=1)
    dates[Festival.QINGMING] = _day_of(_sun_reaches(_QINGMING_LONGITUDE, _julian_day(date(year, 4, 5))))
    return dates


# ---------------------------------------------------------------------------------------------------
# The months of a sui

_MONTHS_IN_SUI = (12, 13)
_SOLSTICE_MONTH = 11
_WINTER_SOLSTICE = 270.0  # degrees of solar longitude
_PRINCIPAL_TERM_STEP = 30.0  # the principal terms are the multiples of 30°
_MEAN_TERM_DAYS = 365.2422 / 12  # a first guess at the time from one principal term to the next


@lru_cache(maxsize=_CACHED_YEARS)
def _sui(year: int) -> tuple[LunarMonth, ...]:
    """The months from month 11 of `year - 1` (holding its winter solstice) up to month 11 of `year`."""
    solstice_before = _sun_reaches(_WINTER_SOLSTICE, _julian_day(date(year - 1, 12, 21)))
    solstice = _sun_reaches(_WINTER_SOLSTICE, _julian_day(date(year, 12, 21)))
    first, end = _lunation_holding(_day_of(solstice_before)), _lunation_holding(_day_of(solstice))
    starts = [_new_moon_day(k) for k in range(first, end + 1)]
    count = end - first
    if count not in _MONTHS_IN_SUI:
        raise ArithmeticError(f"a sui of {count} months in {year}")  # cannot happen: 365 / 29.5 is 12.4
    leap_index = None
    if count == max(_MONTHS_IN_SUI):
        terms = [  # the eleven principal terms between the two solstices
            _day_of(
                _sun_reaches(
                    (_WINTER_SOLSTICE + step * _PRINCIPAL_TERM_STEP) % 360,
                    solstice_before + step * _MEAN_TERM_DAYS,
                )
            )
            for step in range(1, 12)
        ]
        leap_index = next(
            index
            for index in range(1, count)
            if not any(starts[index] <= term < starts[index + 1] for term in terms)
        )
    months: list[LunarMonth] = []
    number = _SOLSTICE_MONTH
    for index in range(count):
        leap = index == leap_index
        if index > 0 and not leap:
            number = number % 12 + 1
        months.append(LunarMonth(number, leap, starts[index], (starts[index + 1] - starts[index]).days))
    return tuple(months)


# ---------------------------------------------------------------------------------------------------
# Time: Julian days, ΔT, China Standard Time

_J2000 = 2451545.0  # JD of 2000-01-01 12:00 TT
_ORDINAL_TO_JD = 1721424.5  # JD of 00:00 UT on the day whose `date.toordinal()` is 0
_SECONDS_PER_DAY = 86400.0
_UTC_OFFSET_DAYS = 8 / 24  # China Standard Time, the calendar's time since 1929
_STANDARD_TIME_SINCE = date(1929, 1, 1)
_BEIJING_OFFSET_DAYS = (116 + 25 / 60) / 360  # before: local mean time at Beijing, 116°25' E (+7:45:40)
_DAYS_PER_JULIAN_YEAR = 365.25


def _julian_day(day: date) -> float:
    """The Julian day of 00:00 on `day` (used only as a first guess, so UT and TT need not differ)."""
    return day.toordinal() + _ORDINAL_TO_JD


def _day_of(jde: float) -> date:
    """The day, in the calendar's time (UTC+8; Beijing's before 1929), on which the instant `jde` falls."""
    year = 2000 + (jde - _J2000) / _DAYS_PER_JULIAN_YEAR
    universal = jde - _delta_t(year) / _SECONDS_PER_DAY - _ORDINAL_TO_JD
    day = date.fromordinal(math.floor(universal + _UTC_OFFSET_DAYS))
    if day < _STANDARD_TIME_SINCE:
        day = date.fromordinal(math.floor(universal + _BEIJING_OFFSET_DAYS))
    return day


def _polynomial(t: float, coefficients: tuple[float, ...]) -> float:
    total = 0.0
    for coefficient in reversed(coefficients):
        total = total * t + coefficient
    return total


# Espenak & Meeus (2006): (first year, last year, epoch, coefficients of (year - epoch)^0, ^1, ...).
_DELTA_T_SPANS: tuple[tuple[float, float, float, tuple[float, ...]], ...] = (
    (1800, 1860, 1800, (13.72, -0.332447, 0.0068612, 0.0041116, -0.00037436, 0.0000121272,
                        -0.0000001699, 0.000000000875)),
    (1860, 1900, 1860, (7.62, 0.5737, -0.251754, 0.01680668, -0.0004473624, 1 / 233174)),
    (1900, 1920, 1900, (-2.79, 1.494119, -0.0598939, 0.0061966, -0.000197)),
    (1920, 1941, 1920, (21.20, 0.84493, -0.076100, 0.0020936)),
    (1941, 1961, 1950, (29.07, 0.407, -1 / 233, 1 / 2547)),
    (1961, 1986, 1975, (45.45, 1.067, -1 / 260, -1 / 718)),
    (1986, 2005, 2000, (63.86, 0.3345, -0.060374, 0.0017275, 0.000651814, 0.00002373599)),
    (2005, 2050, 2000, (62.92, 0.32217, 0.005589)),
)  # fmt: skip
_DELTA_T_BLEND_END = 2150  # 2050-2150: the long-term parabola, shifted to meet the 2005-2050 piece


def _delta_t(year: float) -> float:
    """TT - UT in seconds, for a decimal year."""
    for first, last, epoch, coefficients in _DELTA_T_SPANS:
        if first <= year < last:
            return _polynomial(year - epoch, coefficients)
    long_term = -20 + 32 * ((year - 1820) / 100) ** 2
    if 2050 <= year < _DELTA_T_BLEND_END:
        return long_term - 0.5628 * (_DELTA_T_BLEND_END - year)
    return long_term


# ---------------------------------------------------------------------------------------------------
# New moons (Meeus, chapter 49)

_LUNATION_DAYS = 29.530588861
_NEW_MOON_EPOCH = 2451550.09766  # JDE of the new moon k = 0, 2000-01-06
_LUNATIONS_PER_CENTURY = 1236.85

# (coefficient, power of E, multiples of M, M', F, Ω) of each periodic term of a new moon, in days.
_NEW_MOON_TERMS: tuple[tuple[float, int, int, int, int, int], ...] = (
    (-0.40720, 0, 0, 1, 0, 0), (0.17241, 1, 1, 0, 0, 0), (0.01608, 0, 0, 2, 0, 0),
    (0.01039, 0, 0, 0, 2, 0), (0.00739, 1, -1, 1, 0, 0), (-0.00514, 1, 1, 1, 0, 0),
    (0.00208, 2, 2, 0, 0, 0), (-0.00111, 0, 0, 1, -2, 0), (-0.00057, 0, 0, 1, 2, 0),
    (0.00056, 1, 1, 2, 0, 0), (-0.00042, 0, 0, 3, 0, 0), (0.00042, 1, 1, 0, 2, 0),
    (0.00038, 1, 1, 0, -2, 0), (-0.00024, 1, -1, 2, 0, 0), (-0.00017, 0, 0, 0, 0, 1),
    (-0.00007, 0, 2, 1, 0, 0), (0.00004, 0, 0, 2, -2, 0), (0.00004, 0, 3, 0, 0, 0),
    (0.00003, 0, 1, 1, -2, 0), (0.00003, 0, 0, 2, 2, 0), (-0.00003, 0, 1, 1, 2, 0),
    (0.00003, 0, -1, 1, 2, 0), (-0.00002, 0, -1, 1, -2, 0), (-0.00002, 0, 1, 3, 0, 0),
    (0.00002, 0, 0, 4, 0, 0),
)  # fmt: skip
# (coefficient in days, argument at k = 0 in degrees, degrees per lunation) of the planetary arguments
# A1..A14; A1 also has -0.009173 T².
_PLANETARY_TERMS: tuple[tuple[float, float, float], ...] = (
    (0.000325, 299.77, 0.107408), (0.000165, 251.88, 0.016321), (0.000164, 251.83, 26.651886),
    (0.000126, 349.42, 36.412478), (0.000110, 84.66, 18.206239), (0.000062, 141.74, 53.303771),
    (0.000060, 207.14, 2.453732), (0.000056, 154.84, 7.306860), (0.000047, 34.52, 27.261239),
    (0.000042, 207.19, 0.121824), (0.000040, 291.34, 1.844379), (0.000037, 161.72, 24.198154),
    (0.000035, 239.56, 25.513099), (0.000023, 331.55, 3.592518),
)  # fmt: skip
_A1_T2 = -0.009173


@lru_cache(maxsize=_CACHED_YEARS * 14)
def _new_moon_day(k: int) -> date:
    """The day (UTC+8) of new moon number `k`; k = 0 is the new moon of 2000-01-06."""
    return _day_of(_new_moon(k))


def _new_moon(k: int) -> float:
    """The JDE of new moon number `k` (Meeus 49.1 and the corrections for a new moon)."""
    t = k / _LUNATIONS_PER_CENTURY
    jde = _polynomial(t, (0.0, 0.0, 0.00015437, -0.000000150, 0.00000000073)) + _NEW_MOON_EPOCH
    jde += _LUNATION_DAYS * k
    e = _polynomial(t, (1.0, -0.002516, -0.0000074))
    sun = math.radians(_polynomial(t, (2.5534, 0.0, -0.0000014, -0.00000011)) + 29.10535670 * k)
    moon = math.radians(
        _polynomial(t, (201.5643, 0.0, 0.0107582, 0.00001238, -0.000000058)) + 385.81693528 * k
    )
    latitude = math.radians(
        _polynomial(t, (160.7108, 0.0, -0.0016118, -0.00000227, 0.000000011)) + 390.67050284 * k
    )
    node = math.radians(_polynomial(t, (124.7746, 0.0, 0.0020672, 0.00000215)) - 1.56375588 * k)
    for coefficient, e_power, m, m_moon, f, omega in _NEW_MOON_TERMS:
        argument = m * sun + m_moon * moon + f * latitude + omega * node
        jde += coefficient * e**e_power * math.sin(argument)
    for index, (coefficient, start, rate) in enumerate(_PLANETARY_TERMS):
        argument = start + rate * k + (_A1_T2 * t * t if index == 0 else 0.0)
        jde += coefficient * math.sin(math.radians(argument))
    return jde


def _lunation_holding(day: date) -> int:
    """The number k of the new moon that begins the month in which `day` falls."""
    k = math.floor((_julian_day(day) - _NEW_MOON_EPOCH) / _LUNATION_DAYS)
    while _new_moon_day(k) > day:
        k -= 1
    while _new_moon_day(k + 1) <= day:
        k += 1
    return k


# ---------------------------------------------------------------------------------------------------
# The Sun's apparent longitude (Meeus, chapters 25 and 32, Appendix III; chapter 22 for nutation)

_VsopSeries = tuple[tuple[tuple[float, float, float], ...], ...]  # per power of τ: (A, B, C) terms

# The Earth's heliocentric longitude L = Σ τ^n Σ A cos(B + C τ), A in 1e-8 rad, τ in millennia from J2000.
_EARTH_L: _VsopSeries = (
    (
        (175347046, 0, 0), (3341656, 4.6692568, 6283.07585), (34894, 4.6261, 12566.1517),
        (3497, 2.7441, 5753.3849), (3418, 2.8289, 3.5231), (3136, 3.6277, 77713.7715),
        (2676, 4.4181, 7860.4194), (2343, 6.1352, 3930.2097), (1324, 0.7425, 11506.7698),
        (1273, 2.0371, 529.691), (1199, 1.1096, 1577.3435), (990, 5.233, 5884.927),
        (902, 2.045, 26.298), (857, 3.508, 398.149), (780, 1.179, 5223.694), (753, 2.533, 5507.553),
        (505, 4.583, 18849.228), (492, 4.205, 775.523), (357, 2.92, 0.067), (317, 5.849, 11790.629),
        (284, 1.899, 796.298), (271, 0.315, 10977.079), (243, 0.345, 5486.778), (206, 4.806, 2544.314),
        (205, 1.869, 5573.143), (202, 2.458, 6069.777), (156, 0.833, 213.299), (132, 3.411, 2942.463),
        (126, 1.083, 20.775), (115, 0.645, 0.98), (103, 0.636, 4694.003), (102, 0.976, 15720.839),
        (102, 4.267, 7.114), (99, 6.21, 2146.17), (98, 0.68, 155.42), (86, 5.98, 161000.69),
        (85, 1.3, 6275.96), (85, 3.67, 71430.7), (80, 1.81, 17260.15), (79, 3.04, 12036.46),
        (75, 1.76, 5088.63), (74, 3.5, 3154.69), (74, 4.68, 801.82), (70, 0.83, 9437.76),
        (62, 3.98, 8827.39), (61, 1.82, 7084.9), (57, 2.78, 6286.6), (56, 4.39, 14143.5),
        (56, 3.47, 6279.55), (52, 0.19, 12139.55), (52, 1.33, 1748.02), (51, 0.28, 5856.48),
        (49, 0.49, 1194.45), (41, 5.37, 8429.24), (41, 2.4, 19651.05), (39, 6.17, 10447.39),
        (37, 6.04, 10213.29), (37, 2.57, 1059.38), (36, 1.71, 2352.87), (36, 1.78, 6812.77),
        (33, 0.59, 17789.85), (30, 0.44, 83996.85), (30, 2.74, 1349.87), (25, 3.16, 4690.48),
    ),
    (
        (628331966747, 0, 0), (206059, 2.678235, 6283.07585), (4303, 2.6351, 12566.1517),
        (425, 1.59, 3.523), (119, 5.796, 26.298), (109, 2.966, 1577.344), (93, 2.59, 18849.23),
        (72, 1.14, 529.69), (68, 1.87, 398.15), (67, 4.41, 5507.55), (59, 2.89, 5223.69),
        (56, 2.17, 155.42), (45, 0.4, 796.3), (36, 0.47, 775.52), (29, 2.65, 7.11), (21, 5.34, 0.98),
        (19, 1.85, 5486.78), (19, 4.97, 213.3), (17, 2.99, 6275.96), (16, 0.03, 2544.31),
        (16, 1.43, 2146.17), (15, 1.21, 10977.08), (12, 2.83, 1748.02), (12, 3.26, 5088.63),
        (12, 5.27, 1194.45), (12, 2.08, 4694.0), (11, 0.77, 553.57), (10, 1.3, 6286.6),
        (10, 4.24, 1349.87), (9, 2.7, 242.73), (9, 5.64, 951.72), (8, 5.3, 2352.87),
        (6, 2.65, 9437.76), (6, 4.67, 4690.48),
    ),
    (
        (52919, 0, 0), (8720, 1.0721, 6283.0758), (309, 0.867, 12566.152), (27, 0.05, 3.52),
        (16, 5.19, 26.3), (16, 3.68, 155.42), (10, 0.76, 18849.23), (9, 2.06, 77713.77),
        (7, 0.83, 775.52), (5, 4.66, 1577.34), (4, 1.03, 7.11), (4, 3.44, 5573.14), (3, 5.14, 796.3),
        (3, 6.05, 5507.55), (3, 1.19, 242.73), (3, 6.12, 529.69), (3, 0.31, 398.15),
        (3, 2.28, 553.57), (2, 4.38, 5223.69), (2, 3.75, 0.98),
    ),
    (
        (289, 5.844, 6283.076), (35, 0, 0), (17, 5.49, 12566.15), (3, 5.2, 155.42), (1, 4.72, 3.52),
        (1, 5.3, 18849.23), (1, 5.97, 242.73),
    ),
    ((114, 3.142, 0), (8, 4.13, 6283.08), (1, 3.84, 12566.15)),
    ((1, 3.14, 0),),
)  # fmt: skip
# The Earth-Sun distance R in 1e-8 AU, its largest terms: it only scales the aberration (20" / R).
_EARTH_R: _VsopSeries = (
    (
        (100013989, 0, 0), (1670700, 3.0984635, 6283.07585), (13956, 3.05525, 12566.1517),
        (3084, 5.1985, 77713.7715), (1628, 1.1739, 5753.3849), (1576, 2.8469, 7860.4194),
    ),
    ((103019, 1.10749, 6283.07585), (1721, 1.0644, 12566.1517), (702, 3.142, 0)),
    ((4359, 5.7846, 6283.0758),),
)  # fmt: skip
_VSOP_UNIT = 1e-8
_DAYS_PER_MILLENNIUM = 365250.0
_ARCSECOND = 1 / 3600  # degrees
_FK5_CORRECTION = -0.09033 * _ARCSECOND
_ABERRATION = -20.4898 * _ARCSECOND  # at 1 AU
# Nutation in longitude, Meeus 22 short form (0.5"): terms in arcseconds of sin Ω, sin 2L, sin 2L', sin 2Ω.
_NUTATION = (-17.20, -1.32, -0.23, 0.21)
_DEGREES_PER_DAY = 360 / 365.2422  # the Sun's mean motion, to step towards a longitude
_LONGITUDE_TOLERANCE = 1e-6  # degrees: about a tenth of a second of time
_MAX_STEPS = 10


def _vsop(series: _VsopSeries, tau: float) -> float:
    total = 0.0
    for power, terms in enumerate(series):
        total += tau**power * sum(a * math.cos(b + c * tau) for a, b, c in terms)
    return total * _VSOP_UNIT


def _sun_longitude(jde: float) -> float:
    """The Sun's apparent geocentric longitude at `jde`, in degrees [0, 360)."""
    tau = (jde - _J2000) / _DAYS_PER_MILLENNIUM
    t = tau * 10  # Julian centuries
    geometric = math.degrees(_vsop(_EARTH_L, tau)) + 180
    node = math.radians(_polynomial(t, (125.04452, -1934.136261, 0.0020708, 1 / 450000)))
    sun = math.radians(280.4665 + 36000.7698 * t)
    moon = math.radians(218.3165 + 481267.8813 * t)
    arguments = (node, 2 * sun, 2 * moon, 2 * node)
    nutation = sum(c * math.sin(a) for c, a in zip(_NUTATION, arguments, strict=True)) * _ARCSECOND
    aberration = _ABERRATION / _vsop(_EARTH_R, tau)
    return (geometric + _FK5_CORRECTION + nutation + aberration) % 360


def _sun_reaches(longitude: float, guess: float) -> float:
    """The JDE, near `guess` (within a few weeks), at which the Sun's apparent longitude is `longitude`."""
    jde = guess
    for _ in range(_MAX_STEPS):
        behind = (longitude - _sun_longitude(jde) + 180) % 360 - 180
        jde += behind / _DEGREES_PER_DAY
        if abs(behind) < _LONGITUDE_TOLERANCE:
            break
    return jde
