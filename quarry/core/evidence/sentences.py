"""Which sentences of a passage are read for statements: the passage's sentences (one
cached split that :mod:`.statements` and :mod:`.predicates` share), and of those only
the ones where a number stands on its own, each with the header of the table it is a
row of."""

from __future__ import annotations

import re
from functools import lru_cache

from quarry.core.text.units import line_sentences, logical_lines, sentence_spans

__all__ = ["caption_head", "clock_words", "may_state_value", "numeric_sentences_with_headers", "numeric_sentences_with_topics",
           "passage_sentences"]

_NUMBER_WORDS = frozenset("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                          "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety "
                          "hundred thousand million couple half quarter dozen once twice thrice noon midday midnight".split())
# Periods written without a number ("an hour", "every month", "backups run daily"): see
# :func:`.quantities.sentence_values`.
_PERIOD = (r"(?:a|an|every|each)\s+(?:(?:full|whole|working|business|clear)\s+){0,2}(?:second|minute|hour|day|week|fortnight|month|year)"
           r"|hourly|daily|nightly|weekly|fortnightly|monthly|quarterly|yearly|annually")
_NUMBER_WORD = re.compile(r"\b(?:" + "|".join(sorted(_NUMBER_WORDS)) + "|" + _PERIOD + r")\b", re.IGNORECASE)
# A run of word characters holding a digit ("15:00", "30-day", "€40", but also "p53", "IL-23").
_DIGIT_RUN = re.compile(r"[\w.,:%-]*?\d[\w.,:%-]*")
_LETTER = re.compile(r"[^\W\d_]")
_CITATION = re.compile(r"\[\d+(?:\s*[,–-]\s*\d+)*\]")  # "[9]", "[3, 4]", "[12-15]"


@lru_cache(maxsize=20_000)
def passage_sentences(text: str, *, tenant: str) -> tuple[str, ...]:
    """The sentences of a passage, split once for :mod:`.statements` and :mod:`.predicates`
    (memoised per ``tenant``, the passage's owner)."""
    return tuple(line_sentences(text))


_TABLE_SEPARATOR = re.compile(r"\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?")


def _row_cells(sentence: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in sentence.strip().strip("|").split("|"))


def numeric_sentences_with_headers(text: str, *, tenant: str) -> list[tuple[str, tuple[str, ...]]]:
    """The sentences of ``text`` that may state a value (:func:`may_state_value`; the rest are
    never parsed), each with the column names of the table it is a row of (a row followed
    by a ``| --- |`` separator is a header)."""
    return [(s, header) for s, header, _, _ in numeric_sentences_with_topics(text, tenant=tenant)]


def _is_question(sentence: str) -> bool:
    return sentence.rstrip().rstrip("*_ ").endswith("?")


def _heading(line: str) -> bool:
    return line.lstrip().startswith("#")


# A paragraph or list item that opens with a label in strong emphasis: "**Complaints.**
# Acknowledge within three working days", "- **Late pick-up:** collect by 6pm".
_LEAD_IN = re.compile(r"^[ \t]*(?:[-*+][ \t]+|\d{1,2}[.)][ \t]+)?(?:\*\*|__)([^*_\n]{1,60}?)[ \t]*([.:]?)[ \t]*"
                      r"(?:\*\*|__)[ \t]*([.:]?)[ \t]+\S", re.MULTILINE)
_LIST_MARK = re.compile(r"^(?:[-*+]\s+|\d{1,2}[.)]\s+)")


def _lead_ins(text: str) -> frozenset[str]:
    """The labels that open a paragraph or list item in strong emphasis and end with a full
    stop or a colon: what the sentences after them, on the same line, state values of."""
    return frozenset(m.group(1).strip() for m in _LEAD_IN.finditer(text)
                     if (m.group(2) or m.group(3)) and not _is_question(m.group(1)) and len(m.group(1).split()) <= 6)


# A list item's words before a colon: "- Drop-off and collection, Monday to Saturday: 09:00 to 12:00".
_ITEM_LABEL = re.compile(r"(?:[-*+]|\d{1,2}[.)])\s+([A-Z][^:\d?!.]{1,60}):\s+\S")


def _label_of(line: str, labels: frozenset[str]) -> str:
    """The lead-in label ``line`` opens with (emphasis already removed; a list item's words
    before a colon count too), or ""."""
    body = _LIST_MARK.sub("", line)
    for label in sorted(labels, key=lambda x: (-len(x), x)):  # the longest first, in a fixed order
        if body.startswith(label) and body[len(label):len(label) + 1] in (".", ":"):
            return label
    m = _ITEM_LABEL.match(line)
    return m.group(1).strip() if m and len(m.group(1).split()) <= 8 else ""


def _sentence_topics(text: str, heading: str = "") -> list[str]:
    """For each sentence of :func:`line_sentences` (same order), the question it answers, or
    "": a question earlier in its own paragraph ("How long is the warranty? Two years from
    delivery."), or a question that is a line of its own (a heading, an FAQ entry), which
    stays the topic of the lines after it until the next heading or question line. The
    answer to a question often names no subject: the question does. ``heading``, the heading
    the passage sits under (its text does not hold it), is the first topic when it is a
    question. A paragraph or list item opening with a label in strong emphasis
    ("**Complaints.** Acknowledge within three working days"), or a list item opening with
    words before a colon ("- Drop-off and collection: 09:00 to 12:00"), is about what the
    label names: its sentences take the label (no question mark) as their topic."""
    out: list[str] = []
    carried = heading.lstrip("#-* ").strip() if _is_question(heading) else ""
    labels = _lead_ins(text)
    for line in logical_lines(text):
        sents = [line[a:b] for a, b in sentence_spans(line)]
        if not sents:
            continue
        if _heading(line) or all(_is_question(s) for s in sents):
            carried = sents[-1].lstrip("#-* ").strip() if _is_question(sents[-1]) else ""
            out += [""] * len(sents)
            continue
        if label := _label_of(line, labels):
            out += [label if _LIST_MARK.sub("", s).strip().rstrip(".:") != label else "" for s in sents]
            continue
        topic = carried
        for s in sents:
            if _is_question(s):
                topic = s.lstrip("#-* ").strip()
                out.append("")
            else:
                out.append(topic)
    return out


def numeric_sentences_with_topics(text: str, *, tenant: str,
                                  heading: str = "") -> list[tuple[str, tuple[str, ...], str, str]]:
    """:func:`numeric_sentences_with_headers`, each sentence also with the question it
    answers or the lead-in label it follows (:func:`_sentence_topics`; "" for none) and, for a table row, the head of the
    table's caption (``Table: Security add-on price`` above the table; "" for none): what
    the table's values are of, before a "by", "for" or "from" (:func:`caption_head`)."""
    sents = passage_sentences(text, tenant=tenant)
    topics = _sentence_topics(text, heading)
    if len(topics) != len(sents):
        topics = [""] * len(sents)
    out, header, caption = [], (), ""
    for k, s in enumerate(sents):
        row = s.lstrip().startswith("|")
        if not row:
            header = ()
            m = _CAPTION.match(s)
            caption = caption_head(m.group(1)) if m else ""
        elif k + 1 < len(sents) and _TABLE_SEPARATOR.fullmatch(sents[k + 1].strip()):
            header = _row_cells(s)
            continue
        if may_state_value(s):
            out.append((s, header if row else (), "" if row else topics[k], caption if row else ""))
    return out


_CAPTION = re.compile(r"\s*Table:\s*(.+?)\s*$")
# Where a caption's head ends: "Filing windows *by* claim type", "Copays by visit type *from* 1 July".
_CAPTION_TAIL = re.compile(r"\s(?:by|for|from|per|until|since|after|before|in|on|at|with|under|as of)\s.*$", re.I)


def caption_head(caption: str) -> str:
    """What a table caption says its values are of: "Filing windows by claim type" ->
    "Filing windows"; "Security add-on price" stays whole."""
    return _CAPTION_TAIL.sub("", caption.strip()).strip()


def may_state_value(sentence: str) -> bool:
    """A number stands on its own somewhere in the sentence: not a citation ("[9]") and not
    after the letters of an identifier ("p53", "IL-23", "PC12", "E-4471"), which
    :func:`.quantities.is_code_token` never reads as a value either."""
    s = _CITATION.sub(" ", sentence)
    for m in _DIGIT_RUN.finditer(s):
        run = m.group(0)
        first = next(k for k, c in enumerate(run) if c.isdigit())
        if not _LETTER.search(run, 0, first):
            return True
    return _NUMBER_WORD.search(s) is not None


_HOURS = {w: k for k, w in enumerate("one two three four five six seven eight nine ten eleven twelve".split(), 1)}
_HOUR = r"(?:half\s+past\s+|quarter\s+past\s+)?(?:" + "|".join(_HOURS) + r")"
# Words that may follow a range of clock times ("nine until one *at* weekends"); any other word
# makes the numbers counts of it ("six to eight *days*", "one to two *bookings*").
_AFTER_CLOCK = frozenset("""in on at and or every each from for daily weekdays weekends outside except during then but
when while the monday tuesday wednesday thursday friday saturday sunday mondays tuesdays wednesdays thursdays
fridays saturdays sundays""".split())
_CLOCK_RANGE = re.compile(rf"\b(?:(from)\s+)?({_HOUR})\s+(until|till|to)\s+({_HOUR})\b(?!['’-])(\s*[\w]*)", re.I)


def _hour_of(words: str) -> tuple[int, int]:
    """A spelled hour as (hour on the dial, minutes): "half past five" is (5, 30)."""
    parts = words.lower().split()
    return _HOURS[parts[-1]], 30 if parts[0] == "half" else 15 if parts[0] == "quarter" else 0


def _clock_of(words: str) -> str:
    """A spelled hour as a clock time by the business-hours convention: seven to eleven in
    the morning, twelve at noon, one to six in the afternoon ("half past five" is 17:30)."""
    hour, minutes = _hour_of(words)
    return f"{hour + 12 if hour <= 6 else hour:02d}:{minutes:02d}"


# "six o'clock the evening before", "at 9 o'clock in the morning"
_OCLOCK = re.compile(rf"\b({_HOUR}|1[0-2]|[1-9])\s+o['’]clock\b(?=(\s+(?:in\s+|on\s+)?the\s+(morning|afternoon|evening))?)", re.I)


def _oclock(m: re.Match) -> str:
    """An hour on the clock ("six o'clock") as a clock time: by the part of the day it names;
    else one to six is in the afternoon and twelve is noon, while seven to eleven stays as
    written ("open until eight o'clock" and "eight o'clock in the winter", a first tee time,
    are both said)."""
    word = m.group(1)
    hour, minutes = (int(word), 0) if word.isdigit() else _hour_of(word)
    part = (m.group(3) or "").lower()
    if part == "morning":
        h = hour % 12
    elif part in ("afternoon", "evening"):
        h = hour % 12 + 12
    elif hour <= 6 or hour == 12:
        h = hour + 12 if hour <= 6 else hour
    else:
        return m.group(0)
    return f"{h:02d}:{minutes:02d}"


def clock_words(sentence: str) -> str:
    """``sentence`` with each range of clock times written in words and without "am" or "pm"
    ("from eight until twelve and two until six", "half past nine till five") written as
    clock times (08:00 until 12:00 ...): hours are read as business hours (:func:`_clock_of`).
    A range joined by "to" needs a "from" before it, and no range is read where a word that
    could be a counted noun follows ("six to eight days", "from one to two bookings"). An hour
    "o'clock" is a clock time too ("six o'clock the evening before" is 18:00)."""
    if "clock" in sentence.lower():
        sentence = _OCLOCK.sub(_oclock, sentence)
    if not any(w in sentence.lower() for w in ("until", "till", " to ")):
        return sentence

    def put(m: re.Match) -> str:
        after = m.group(5).strip().lower()
        if (m.group(3).lower() == "to" and not m.group(1)) or (after and after not in _AFTER_CLOCK):
            return m.group(0)
        lead = f"{m.group(1)} " if m.group(1) else ""
        return f"{lead}{_clock_of(m.group(2))} {m.group(3)} {_clock_of(m.group(4))}{m.group(5)}"
    return _CLOCK_RANGE.sub(put, sentence)
