// corpus_words.cpp — see corpus_words.h. The lists are hand-written, familiar words first. Animals that
// are mostly something else in this corpus's code and documentation ("python", "mouse", "bug") and first
// names that are mostly common words ("Will", "Mark", "Job") are left out.
#include "data/corpus_words.h"

#include <set>

namespace phasescope {

namespace {

const char* const kAnimals[] = {
    "cat",       "dog",       "horse",     "cow",      "pig",     "sheep",   "goat",    "lion",
    "tiger",     "bear",      "wolf",      "fox",      "deer",    "rabbit",  "rat",     "bird",
    "fish",      "snake",     "frog",      "duck",     "goose",   "chicken", "hen",     "eagle",
    "owl",       "hawk",      "dove",      "crow",     "bee",     "ant",     "spider",  "whale",
    "shark",     "dolphin",   "camel",     "elephant", "monkey",  "ape",     "zebra",   "giraffe",
    "donkey",    "mule",      "ox",        "bull",     "lamb",    "calf",    "pony",    "kitten",
    "puppy",     "parrot",    "penguin",   "turtle",   "lizard",  "crab",    "lobster", "squirrel",
    "beetle",    "moth",      "butterfly", "swan",     "raven",   "sparrow", "pigeon",  "panda",
    "koala",     "kangaroo",  "hippo",     "rhino",    "otter",   "beaver",  "badger",  "hedgehog",
    "moose",     "buffalo",   "bison",     "leopard",  "cheetah", "jaguar",  "lynx",    "hound",
    "stag",      "boar",      "ram",       "ewe",      "serpent", "viper",   "cobra",   "scorpion",
    "locust",    "hornet",    "wasp",      "snail",    "oyster",  "squid",   "octopus", "salmon",
    "trout",     "cod",       "eel",       "tuna",     "falcon",  "vulture", "stork",   "heron",
    "peacock",   "turkey",    "quail",     "lark",     "finch",   "wren",    "cricket", "flea",
    "gnat",      "weasel",    "ferret",    "hare",     "gull",    "ostrich", "pelican", "flamingo",
    "alligator", "crocodile", "toad",      "newt",     "unicorn", "dragon",  "asp",     "adder",
    "hart",      "heifer",    "bullock",   "swine",    "kine",    "colt",    "mare",    "stallion",
    "foal",      "puppies",   "wolves",    "foxes",    "lions",   "horses",  "dogs",    "cats",
    "bees",      "ants",      "birds",     "camels",   "goats",   "oxen",    "lambs",   "doves",
    "eagles",
};

const char* const kNouns[] = {
    "house",    "tree",   "book",    "door",    "river",    "mountain",   "stone",    "apple",    "bread",
    "water",    "fire",   "garden",  "city",    "road",     "ship",       "boat",     "car",      "bridge",
    "wall",     "tower",  "castle",  "church",  "school",   "market",     "forest",   "island",   "lake",
    "sea",      "ocean",  "star",    "moon",    "sun",      "cloud",      "rain",     "snow",     "wind",
    "flower",   "rose",   "grass",   "leaf",    "seed",     "fruit",      "grape",    "wine",     "milk",
    "honey",    "salt",   "oil",     "gold",    "silver",   "iron",       "copper",   "glass",    "paper",
    "letter",   "pen",    "cup",     "plate",   "bowl",     "knife",      "sword",    "shield",   "crown",
    "ring",     "coin",   "bell",    "drum",    "harp",     "lamp",       "candle",   "mirror",   "clock",
    "bed",      "bag",    "basket",  "rope",    "chain",    "wheel",      "hammer",   "nail",     "bottle",
    "jar",      "pot",    "kettle",  "coat",    "hat",      "shoe",       "shirt",    "dress",    "cloak",
    "belt",     "glove",  "cake",    "cheese",  "egg",      "meat",       "rice",     "corn",     "wheat",
    "barley",   "bean",   "onion",   "pepper",  "orange",   "lemon",      "banana",   "cherry",   "peach",
    "pear",     "plum",   "olive",   "fig",     "nut",      "piano",      "guitar",   "violin",   "ball",
    "kite",     "doll",   "toy",     "gift",    "desk",     "pencil",     "tent",     "cabin",    "farm",
    "barn",     "beach",  "desert",  "valley",  "hill",     "cave",       "rock",     "sand",     "pearl",
    "diamond",  "king",   "queen",   "prince",  "priest",   "soldier",    "servant",  "farmer",   "doctor",
    "teacher",  "judge",  "captain", "sailor",  "hunter",   "baker",      "smith",    "child",    "baby",
    "boy",      "girl",   "man",     "woman",   "father",   "mother",     "brother",  "sister",   "son",
    "daughter", "wife",   "husband", "friend",  "neighbor", "stranger",   "land",     "earth",    "world",
    "heaven",   "sky",    "field",   "village", "town",     "country",    "kingdom",  "palace",   "temple",
    "altar",    "gate",   "window",  "table",   "chair",    "room",       "roof",     "floor",    "kitchen",
    "bread",    "food",   "feast",   "fish",    "bone",     "blood",      "hand",     "heart",    "head",
    "face",     "eye",    "ear",     "nose",    "mouth",    "tooth",      "tongue",   "arm",      "leg",
    "foot",     "finger", "hair",    "skin",    "voice",    "song",       "music",    "story",    "picture",
    "painting", "statue", "camera",  "phone",   "radio",    "television", "computer", "keyboard", "printer",
    "machine",  "engine", "rocket",  "plane",   "bicycle",  "truck",      "bus",      "wagon",    "chariot",
    "horn",     "flute",  "trumpet", "arrow",   "bow",      "spear",      "axe",      "tool",     "box",
    "hut",      "nest",   "web",     "shadow",  "light",    "fog",        "storm",    "thunder",  "lightning",
    "ice",      "flame",  "smoke",   "ash",     "dust",     "mud",        "clay",     "brick",    "wood",
    "cotton",   "wool",   "silk",    "leather", "feather",  "horn",       "wing",     "tail",
};

const char* const kNames[] = {
    "Alice",    "Bob",       "Carol",    "Dave",      "Eve",       "Frank",     "Grace",    "Henry",
    "Isaac",    "Jack",      "James",    "John",      "Mary",      "Peter",     "Paul",     "David",
    "Sarah",    "Anna",      "Tom",      "Tim",       "Sam",       "Ben",       "Max",      "Alex",
    "Tony",     "Linda",     "Susan",    "Karen",     "Nancy",     "Steve",     "Mike",     "Joe",
    "Jim",      "Ann",       "Jane",     "Jean",      "Lisa",      "Laura",     "Julia",    "Chris",
    "Martin",   "Robert",    "Richard",  "William",   "Charles",   "Edward",    "Victor",   "Oscar",
    "Walter",   "Arthur",    "Albert",   "Carl",      "Eric",      "Ian",       "Neil",     "George",
    "Harry",    "Fred",      "Emma",     "Kate",      "Greg",      "Linus",     "Guido",    "Andrew",
    "Simon",    "Philip",    "Thomas",   "Matthew",   "Luke",      "Stephen",   "Timothy",  "Daniel",
    "Samuel",   "Joseph",    "Jacob",    "Abraham",   "Moses",     "Aaron",     "Adam",     "Noah",
    "Solomon",  "Saul",      "Joshua",   "Elijah",    "Elisha",    "Jonah",     "Jonathan", "Nathan",
    "Benjamin", "Judah",     "Levi",     "Reuben",    "Simeon",    "Ephraim",   "Isaiah",   "Jeremiah",
    "Ezekiel",  "Hosea",     "Joel",     "Amos",      "Micah",     "Caleb",     "Gideon",   "Samson",
    "Absalom",  "Abner",     "Joab",     "Jesse",     "Boaz",      "Ruth",      "Naomi",    "Hannah",
    "Deborah",  "Esther",    "Rachel",   "Leah",      "Rebekah",   "Miriam",    "Martha",   "Lazarus",
    "Herod",    "Pilate",    "Barnabas", "Silas",     "Titus",     "Jesus",     "Eli",      "Esau",
    "Laban",    "Ishmael",   "Elias",    "Zechariah", "Ezra",      "Nehemiah",  "Daniel",   "Cain",
    "Abel",     "Seth",      "Enoch",    "Lamech",    "Shem",      "Japheth",   "Isaac",    "Pharaoh",
    "Balaam",   "Jehu",      "Ahab",     "Jezebel",   "Hezekiah",  "Josiah",    "Zedekiah", "Manasseh",
    "Uriah",    "Bathsheba", "Delilah",  "Ezekiel",   "Jeroboam",  "Rehoboam",  "Asa",      "Jehoshaphat",
    "Joram",    "Oliver",    "Jake",     "Lucy",      "Sophie",    "Olivia",    "Jessica",  "Emily",
    "Helen",    "Betty",     "Dorothy",  "Margaret",  "Elizabeth", "Catherine", "Alan",     "Brian",
    "Kevin",    "Jason",     "Ryan",     "Gary",      "Larry",     "Scott",     "Jeff",     "Bruce",
    "Roger",    "Ralph",     "Louis",    "Howard",    "Eugene",    "Harold",    "Henry",    "Leonard",
    "Lewis",    "Marcus",    "Julius",   "Caesar",    "Brutus",    "Homer",     "Plato",    "Newton",
    "Darwin",   "Einstein",  "Euler",    "Gauss",     "Knuth",     "Dijkstra",
};

// places, then other proper nouns: taken after the people when the vocabulary has too few first names
const char* const kPlaces[] = {
    "Israel",    "Egypt",   "Jerusalem", "Babylon",  "Jordan",     "Zion",      "Canaan",   "Moab",
    "Assyria",   "Syria",   "Judea",     "Galilee",  "Samaria",    "Bethlehem", "Nazareth", "Rome",
    "Greece",    "Persia",  "Edom",      "Gilead",   "Lebanon",    "Damascus",  "Sinai",    "Eden",
    "Bethel",    "Gaza",    "Tyre",      "Sidon",    "Nineveh",    "Sodom",     "Jericho",  "Hebron",
    "London",    "Paris",   "Berlin",    "Texas",    "California", "America",   "England",  "France",
    "Germany",   "Japan",   "China",     "India",    "Europe",     "Africa",    "Asia",     "Boston",
    "Chicago",   "Tokyo",   "Amsterdam", "Finland",  "Canada",     "Australia", "Russia",   "Italy",
    "Spain",     "Holland", "Ireland",   "Scotland", "Wales",      "Mexico",    "Brazil",   "Oxford",
    "Cambridge", "Vienna",  "Prague",    "Moscow",   "Athens",     "Cairo",     "Sydney",   "Seattle",
    "Portland",
};

const char* const kProperNouns[] = {
    "Linux",     "Python",  "Windows",  "Unix",     "Unicode",    "Intel",  "Microsoft", "Apple",
    "Google",    "Java",    "Perl",     "Ruby",     "Debian",     "Ubuntu", "Android",   "Ethernet",
    "Bluetooth", "Mozilla", "Firefox",  "Emacs",    "Sphinx",     "Tegra",  "Qualcomm",  "Samsung",
    "Marvell",   "Realtek", "Broadcom", "Nvidia",   "Freescale",  "Cortex", "Armada",    "Solaris",
    "Cygwin",    "Tcl",     "Tk",       "Tkinter",  "Cython",     "Jython", "Django",    "Netscape",
    "Oracle",    "Sun",     "Xen",      "Motorola", "Nokia",      "Sony",   "Toshiba",   "Fujitsu",
    "Dell",      "Lenovo",  "Amazon",   "Mac",      "Emscripten",
};

// " word" -> its token when it is one token used at least kLookupMinCount times, else -1
int single_token(const Tokenizer& tok, const std::vector<int64_t>& counts, const std::string& word) {
  const std::vector<int> ids = tok.encode(" " + word);
  if (ids.size() != 1 || ids[0] < 0 || size_t(ids[0]) >= counts.size()) return -1;
  return counts[size_t(ids[0])] >= kLookupMinCount ? ids[0] : -1;
}

// take words from `list` while fewer than n are chosen; `used` keeps ids unique across lists
template <size_t N>
void take(const char* const (&list)[N], const Tokenizer& tok, const std::vector<int64_t>& counts, int n,
          std::set<int>& used, std::vector<LookupWord>& out) {
  for (const char* w : list) {
    if (int(out.size()) >= n) return;
    const int id = single_token(tok, counts, w);
    if (id >= 0 && used.insert(id).second) out.push_back({id, std::string(" ") + w});
  }
}

}  // namespace

LookupChoice corpus_choose_lookup_words(const Tokenizer& tok, const std::vector<int64_t>& counts, int n) {
  LookupChoice c;
  std::set<int> used;
  take(kAnimals, tok, counts, n, used, c.keys);
  c.animal_keys = int(c.keys.size());
  take(kNouns, tok, counts, n, used, c.keys);
  take(kNames, tok, counts, n, used, c.names);
  c.people_names = int(c.names.size());
  take(kPlaces, tok, counts, n, used, c.names);
  c.place_names = int(c.names.size()) - c.people_names;
  take(kProperNouns, tok, counts, n, used, c.names);
  return c;
}

}  // namespace phasescope
