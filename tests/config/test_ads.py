"""ClassAd plumbing: hook text, the `-----` pair, evaluation, and stored dicts."""

from __future__ import annotations

import classad2
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fetchwork.config import ads
from fetchwork.errors import AdError
from fetchwork.startd import fetchoutput

DELAY = 'ifThenElse(State == "Claimed" && Activity == "Idle", 0, 300)'

_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True).filter(
    lambda name: name.lower() not in {"true", "false", "undefined", "error", "is", "isnt",
                                      "parent", "my", "target", "super"})
_strings = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                   max_size=40)
_literals = st.one_of(
    st.integers(min_value=-(2**62), max_value=2**62),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    _strings,
)
_expressions = st.sampled_from([
    DELAY, "TARGET.Memory >= MY.RequestMemory && TARGET.Cpus >= 1",
    "RequestMemory * 1024", '{ 1, 2, "three" }', '[ a = 1; b = "x" ]', "undefined",
    'regexp("^slot[0-9]+", Name)', "Owner =?= \"alice\" || JobPrio > 5",
    'strcat("a\\nb", "\\\\")',
]).map(classad2.ExprTree)


def _ads(values):
    return st.dictionaries(_names, values, max_size=12).map(
        lambda attrs: _build({k.lower(): (k, v) for k, v in attrs.items()}))


def _build(unique):
    ad = classad2.ClassAd()
    for name, value in unique.values():
        ad[name] = value
    return ad


@settings(max_examples=200)
@given(ad=_ads(st.one_of(_literals, _expressions)))
def test_printed_ads_parse_back_equal(ad):
    assert ads.parse_ad(ads.format_ad(ad)) == ad


@settings(max_examples=200)
@given(ad=_ads(st.one_of(_literals, _expressions)))
def test_dicts_round_trip_through_msgpack_keeping_expressions(ad):
    stored = msgpack.unpackb(msgpack.packb(ads.to_dict(ad)), raw=False)
    back = ads.from_dict(stored)
    assert back == ad
    for name in ad.keys():
        assert isinstance(back[name], classad2.ExprTree) == isinstance(ad[name],
                                                                        classad2.ExprTree)


@given(job=_ads(_literals), slot=_ads(_literals))
def test_pairs_split_into_the_ads_joined(job, slot):
    first, second = ads.split_pair(ads.join_pair(job, slot))
    assert first == job and second == slot
    assert ads.first_of_pair(ads.join_pair(job, slot)) == job


@pytest.mark.parametrize("text", ['Cmd = "/bin/true"\n', '-----\nName = "x"\n',
                                  'Cmd = "/bin/true"\n  -----  \nName = "x"\n'])
def test_the_first_of_a_pair_is_split_pairs_first(text):
    assert ads.first_of_pair(text) == ads.split_pair(text)[0]


def test_the_first_of_a_pair_leaves_the_second_unread():
    text = 'Cmd = "/bin/true"\n-----\nthis is no ad\n'
    assert ads.first_of_pair(text)["Cmd"] == "/bin/true"
    with pytest.raises(AdError):
        ads.split_pair(text)


def test_an_expression_stays_an_expression():
    ad = ads.parse_ad(f"FetchWorkDelay = {DELAY}\nMemory = 2048\n")
    stored = ads.to_dict(ad)
    assert stored["Memory"] == 2048
    assert stored["FetchWorkDelay"] == {"$expr": ads.unparse(ad.lookup("FetchWorkDelay"))}
    back = ads.from_dict(stored)
    slot = classad2.ClassAd({"State": "Claimed", "Activity": "Idle"})
    assert ads.evaluate(back.lookup("FetchWorkDelay"), slot) == 0
    slot["Activity"] = "Busy"
    assert ads.evaluate(back.lookup("FetchWorkDelay"), slot) == 300


def test_the_pair_uses_a_dash_line():
    text = ads.join_pair({"Cmd": "/bin/true"}, {"Name": "slot1@host"})
    assert text == 'Cmd = "/bin/true"\n-----\nName = "slot1@host"\n'


def test_split_without_separator_gives_one_ad():
    first, second = ads.split_pair('Cmd = "/bin/true"\n')
    assert first["Cmd"] == "/bin/true" and second is None


def test_comments_and_blank_lines_in_hook_output_are_fine():
    ad = ads.parse_ad('\n# from the hook\nCmd = "/bin/echo"\n\n  Args = "hi"\n')
    assert ad["Cmd"] == "/bin/echo" and ad["Args"] == "hi"


def test_a_later_attribute_wins_case_insensitively():
    ad = ads.parse_ad("JobPrio = 1\njobprio = 2\n")
    assert ad["JobPrio"] == 2 and len(ad) == 1


def test_new_format_text_is_accepted():
    ad = ads.parse_ad('[ Cmd = "/bin/true"; Memory = 10 ]')
    assert ad["Cmd"] == "/bin/true" and ad["Memory"] == 10


@pytest.mark.parametrize("text,line,message", [
    ("Cmd = \"/bin/true\"\nthis is not an attribute\n", 2, "expected 'Name = expression'"),
    ("A = 1\nB = 1 +\n", 2, "not a ClassAd expression"),
    ("A =\n", 1, "attribute A has no value"),
    ("\n\n3x = 1\n", 3, "expected 'Name = expression'"),
])
def test_bad_text_names_the_line(text, line, message):
    with pytest.raises(AdError, match=rf"line {line}: {message}") as caught:
        ads.parse_ad(text, source="fetch hook")
    assert caught.value.line == line
    assert str(caught.value).startswith("fetch hook:")


def test_bad_new_format_is_an_error():
    with pytest.raises(AdError):
        ads.parse_ad("[ A = ")


def test_evaluate_with_my_and_target():
    job = ads.parse_ad("RequestMemory = 100\nRequirements = TARGET.Memory >= MY.RequestMemory\n")
    slot = ads.parse_ad("Memory = 50\n")
    assert ads.evaluate_attr(job, "Requirements", slot) is False
    slot["Memory"] = 500
    assert ads.evaluate_attr(job, "Requirements", slot) is True
    assert ads.evaluate("TARGET.Memory - MY.RequestMemory", job, slot) == 400


def test_missing_attributes_evaluate_undefined():
    assert ads.evaluate_attr(classad2.ClassAd(), "Start") == classad2.Value.Undefined
    assert ads.as_bool(classad2.Value.Undefined, default=True) is True
    assert ads.as_bool(classad2.Value.Error) is False


def test_as_number_and_as_bool():
    assert ads.as_number(True) == 1.0 and ads.as_number("x") is None
    assert ads.as_bool(2) is True and ads.as_bool(0.0) is False


def test_from_dict_accepts_plain_lists_and_none():
    ad = ads.from_dict({"L": [1, "a", True], "U": None})
    assert ads.evaluate_attr(ad, "L") == [1, "a", True]
    assert ad.lookup("U").eval() == classad2.Value.Undefined


def test_from_dict_rejects_what_an_ad_cannot_hold():
    with pytest.raises(AdError, match="cannot store"):
        ads.from_dict({"X": object()})
    with pytest.raises(AdError, match="nested mapping"):
        ads.from_dict({"X": {"a": 1}})


def test_plain_literals_are_written_as_classad_writes_them():
    ad = classad2.ClassAd()
    values = [0, -7, 2**40, True, False, "", "plain text/with:marks", 'a "quote"', "back\\slash",
              "tab\there", "new\nline", "é", 2.5]
    for number, value in enumerate(values):
        ad[f"A{number}"] = value
    for name in ad.keys():
        written = ads.attr_text(ad, name)
        assert ads.parse_ad(f"X = {written}")["X"] == ad[name]
        if not isinstance(ad[name], float):
            assert written == ads.unparse(ad.lookup(name))


@pytest.mark.parametrize("text", ["0", "7", "-12", "123456789012345678", "-0",
                                  "99999999999999999999", '"plain text"', '"with \\"quote\\""',
                                  '""', "true", "false", "TRUE", "1.5", "undefined", "{1, 2}",
                                  "MY.A + 1"])
def test_literals_read_directly_are_what_the_classad_parser_reads(text):
    read = ads.parse_ad(f"A = {text}")
    expected = classad2.ClassAd()
    expected["A"] = ads.parse_expr(text)
    assert str(read) == str(expected)
    assert type(read["A"]) is type(expected["A"])


def test_an_expression_text_is_parsed_once_per_process():
    # classad2 never gives back what each ExprTree it makes costs: daemons reuse them.
    assert ads.parse_expr("MY.A + 1 > TARGET.B") is ads.parse_expr("MY.A + 1 > TARGET.B")
    with pytest.raises(AdError, match="line 3"):
        ads.parse_expr("A +", line=3)


def test_evaluate_attr_tells_absent_from_undefined():
    ad = ads.parse_ad("A = 2\nB = undefined\nC = MY.A * 3\nD = TARGET.X > 1\n")
    target = ads.parse_ad("X = 5\n")
    assert ads.evaluate_attr(ad, "A") == 2
    assert ads.evaluate_attr(ad, "C") == 6
    assert ads.evaluate_attr(ad, "D", target) is True
    assert ads.evaluate_attr(ad, "B", absent=None) is classad2.Value.Undefined
    assert ads.evaluate_attr(ad, "Missing", absent=None) is None
    assert ads.evaluate_attr(ad, "Missing") is classad2.Value.Undefined


@given(job=_ads(_literals), slot=_ads(_literals))
def test_joined_texts_are_the_joined_pair(job, slot):
    assert ads.join_texts(ads.format_ad(job), ads.format_ad(slot)) == ads.join_pair(job, slot)


def test_a_text_without_its_last_newline_still_gets_the_dash_line_alone():
    assert ads.join_texts('Cmd = "/bin/true"', 'Name = "x"\n') == \
        'Cmd = "/bin/true"\n-----\nName = "x"\n'


def test_an_ad_text_is_the_formatted_ad_and_gives_its_values_to_the_first_reader_only():
    ad = ads.parse_ad(f'Cmd = "/bin/true"\nFetchWorkDelay = {DELAY}\nRequestCpus = 2\n')
    text = ads.AdText(ad)
    assert text == ads.format_ad(ad) and isinstance(text, str)
    first = ads.parse_taken(text)
    assert first == ads.parse_values(text)
    second = ads.parse_taken(text)  # parsed from the text: the first reader may change its own
    assert second is not first and second == first
    assert ads.parse_taken(str(text)) == first


def test_an_ad_text_of_stored_values_is_the_text_of_their_ad():
    stored = {"Cmd": "/bin/true", "ClusterId": 4, "Lease": 1795866640.361, "Note": 'a "b"',
              "Requirements": {"$expr": "TARGET.Memory > 100"}, "Rerunnable": True}
    text = ads.AdText(stored)  # the same lines (in the order given rather than the ad's)
    assert sorted(text.splitlines()) == sorted(ads.format_ad(ads.from_dict(stored)).splitlines())
    assert ads.parse_taken(text) == ads.values_of(stored)


def test_values_read_from_text_are_what_parse_ad_sets():
    text = 'Cmd = "/bin/true"\nLease = 1795866640.361\nR = TARGET.Memory > 1\nr = 2\nL = {1, 2}\n'
    values = ads.parse_values(text)
    assert values["Lease"] == 1795866640.361 and values["R"] == 2 and "r" not in values
    assert sorted(ads.format_values(values).splitlines()) == \
        sorted(ads.format_ad(ads.parse_ad(text)).splitlines())


def test_a_fetch_hooks_ad_text_is_read_as_its_ad():
    ad = ads.parse_ad('Cmd = "/bin/true"\nClusterId = 4\n')
    fetched = fetchoutput.read_fetch_output(ads.AdText(ad))
    assert fetched.found_work and fetched.job_ad is not None
    assert fetched.job_ad.attrs() == {"Cmd": "/bin/true", "ClusterId": 4}
