// Stop strings over an answer's bytes (server/http/answer_stops.h): cut before the first
// one, bytes that may begin one held, and under tool_choice "auto" applied only to the
// free text before a call's opening tag, never inside the call.
#include "server/http/answer_stops.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace attnserve::http {
namespace {

constexpr char kTag[] = "<tool_call>";

// `pieces` through `stops` one after another: what passed, then the rest at the end.
std::string Through(AnswerStops& stops, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += stops.Pass(p);
  return out + stops.Rest();
}

TEST(AnswerStopsTest, FreeTextEndsBeforeTheFirstStopStringAcrossPieces) {
  AnswerStops stops({"END", "xyz"});
  EXPECT_EQ(stops.Pass("abc E"), "abc ");  // "E" may begin END: held
  EXPECT_FALSE(stops.stopped());
  EXPECT_EQ(stops.Pass("N"), "");
  EXPECT_EQ(stops.Pass("D and more"), "");
  EXPECT_TRUE(stops.stopped());
  EXPECT_EQ(stops.Pass("after"), "");
  EXPECT_EQ(stops.Rest(), "");

  AnswerStops earliest({"b", "abc"});
  EXPECT_EQ(Through(earliest, {"xab", "c"}), "xa");
  EXPECT_TRUE(earliest.stopped());

  AnswerStops held({"END"});
  EXPECT_EQ(Through(held, {"the E", "N"}), "the EN");  // never completed: given back
  EXPECT_FALSE(held.stopped());

  AnswerStops none({});
  EXPECT_EQ(Through(none, {"a", "<tool_ca"}), "a<tool_ca");
}

TEST(AnswerStopsTest, UnderAutoAStopStringInTheFreeTextEndsTheAnswer) {
  AnswerStops stops({"\n"}, kTag);
  EXPECT_EQ(Through(stops, {"Checking.", "\nmore <tool_call>{}"}), "Checking.");
  EXPECT_TRUE(stops.stopped());
}

TEST(AnswerStopsTest, UnderAutoNoStopStringCutsTheCall) {
  // The call's text holds every stop string; all of it passes.
  const std::string call = "<tool_call>{\"name\": \"f\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
  AnswerStops stops({"}", "\"", "Paris", "<tool"}, kTag);
  std::string out;
  for (char c : "Sure. " + call) out += stops.Pass(std::string(1, c));
  out += stops.Rest();
  EXPECT_EQ(out, "Sure. " + call);
  EXPECT_FALSE(stops.stopped());
}

TEST(AnswerStopsTest, UnderAutoAStopStringRunningIntoTheTagIsTheCalls) {
  // "e <tool" ends inside the tag: not wholly free text.
  AnswerStops into({"e <tool"}, kTag);
  EXPECT_EQ(Through(into, {"Sure <to", "ol_call>{}"}), "Sure <tool_call>{}");
  EXPECT_FALSE(into.stopped());
  // "<" may begin the tag: decided once the tag completes or does not.
  AnswerStops tag({"<"}, kTag);
  EXPECT_EQ(tag.Pass("a <too"), "a ");
  EXPECT_FALSE(tag.stopped());
  EXPECT_EQ(tag.Pass("l_call>{\"<\"}"), "<tool_call>{\"<\"}");
  EXPECT_FALSE(tag.stopped());
  AnswerStops not_tag({"<"}, kTag);
  EXPECT_EQ(not_tag.Pass("a <too"), "a ");
  EXPECT_EQ(not_tag.Pass("k"), "");  // "<took" begins no tag: "<" was free text
  EXPECT_TRUE(not_tag.stopped());
  // The answer ended with the tag unfinished: it was free text, and "<" ends it.
  AnswerStops cut({"<"}, kTag);
  EXPECT_EQ(Through(cut, {"a <tool_ca"}), "a ");
  EXPECT_TRUE(cut.stopped());
}

TEST(AnswerStopsTest, UnderAutoAnEarlierStopWaitsForOneThatMayRunIntoTheTag) {
  // "b <" starts before "<t" and may yet be the tag's: nothing is decided.
  AnswerStops stops({"b <", " <t"}, kTag);
  EXPECT_EQ(stops.Pass("ab <t"), "a");
  EXPECT_FALSE(stops.stopped());
  EXPECT_EQ(stops.Pass("x"), "");  // "<tx" is no tag: the first stop string wins
  EXPECT_TRUE(stops.stopped());
}

}  // namespace
}  // namespace attnserve::http
