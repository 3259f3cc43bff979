"""Raw word lists behind the project's value pools (``pools.project_pools``). Data only, no logic."""

FIRST_NAMES = tuple("""
James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William Barbara Richard Susan Joseph Jessica
Thomas Sarah Charles Karen Christopher Lisa Daniel Nancy Matthew Betty Anthony Sandra Mark Margaret Donald Ashley
Steven Kimberly Andrew Emily Paul Donna Joshua Michelle Kenneth Carol Kevin Amanda Brian Melissa George Deborah
Timothy Stephanie Ronald Dorothy Jason Rebecca Edward Sharon Jeffrey Laura Ryan Cynthia Jacob Amy Gary Kathleen
Nicholas Angela Eric Shirley Jonathan Brenda Stephen Emma Larry Anna Justin Pamela Scott Nicole Brandon Samantha
Benjamin Katherine Samuel Christine Gregory Helen Alexander Debra Patrick Rachel Frank Carolyn Raymond Janet Jack
Maria Dennis Catherine Jerry Heather Tyler Diane Aaron Olivia Jose Julie Adam Joyce Nathan Victoria Henry Ruth
Zachary Virginia Douglas Lauren Peter Kelly Kyle Christina Noah Joan Ethan Evelyn Jeremy Judith Walter Andrea
Christian Hannah Keith Megan Roger Cheryl Terry Jacqueline Austin Martha Sean Madison Gerald Teresa Carl Gloria
Harold Sara Dylan Janice Arthur Ann Lawrence Kathryn Jordan Abigail Jesse Sophia Bryan Frances Billy Jean Bruce
Alice Gabriel Judy Joe Isabella Logan Julia Alan Grace Juan Amber Albert Denise Willie Danielle Elijah Marilyn
Wayne Beverly Randy Charlotte Vincent Natalie Mason Theresa Roy Diana Ralph Brittany Bobby Doris Russell Kayla
Bradley Alexis Philip Lori Eugene Marie
""".split())

LAST_NAMES = tuple("""
Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez Gonzalez Wilson Anderson
Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris Sanchez Clark Ramirez Lewis Robinson Walker Young
Allen King Wright Scott Torres Nguyen Hill Flores Green Adams Nelson Baker Hall Rivera Campbell Mitchell Carter
Roberts Gomez Phillips Evans Turner Diaz Parker Cruz Edwards Collins Reyes Stewart Morris Morales Murphy Cook Rogers
Gutierrez Ortiz Morgan Cooper Peterson Bailey Reed Kelly Howard Ramos Kim Cox Ward Richardson Watson Brooks Chavez
Wood James Bennett Gray Mendoza Ruiz Hughes Price Alvarez Castillo Sanders Patel Myers Long Ross Foster Jimenez
Powell Jenkins Perry Russell Sullivan Bell Coleman Butler Henderson Barnes Gonzales Fisher Vasquez Simmons Romero
Jordan Patterson Alexander Hamilton Graham Reynolds Griffin Wallace Moreno West Cole Hayes Bryant Herrera Gibson
Ellis Tran Medina Aguilar Stevens Murray Ford Castro Marshall Owens Harrison Fernandez McDonald Woods Washington
Kennedy Wells Vargas Henry Chen Freeman Webb Tucker Guzman Burns Crawford Olson Simpson Porter Hunter Gordon Mendez
Silva Shaw Snyder Mason Dixon Munoz Hunt Hicks Holmes Palmer Wagner Black Robertson Boyd Rose Stone Salazar Fox
Warren Mills Meyer Rice Schmidt Garza Daniels Ferguson Nichols Stephens Soto Weaver Ryan Gardner Payne Grant Dunn
Kelley Spencer Hawkins Arnold Pierce Vazquez Hansen Peters Santos Hart Bradley Knight Elliott Cunningham Duncan
""".split())

SYL_ON = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch",
          "cl", "dr", "gr", "kr", "sh", "st", "th", "tr")
SYL_MID = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "ar", "el", "or", "an", "in", "en")
SYL_FIRST_END = ("la", "na", "ra", "ton", "lyn", "den", "ric", "mon", "ria", "lie")
SYL_LAST_END = ("berg", "ford", "ley", "son", "wick", "man", "dale", "worth", "ridge", "stein")

CITIES = tuple(line.strip() for line in """
New York, NY|Los Angeles, CA|Chicago, IL|Houston, TX|Phoenix, AZ|Philadelphia, PA|San Antonio, TX|San Diego, CA
Dallas, TX|San Jose, CA|Austin, TX|Jacksonville, FL|Fort Worth, TX|Columbus, OH|Charlotte, NC|San Francisco, CA
Indianapolis, IN|Seattle, WA|Denver, CO|Washington, DC|Boston, MA|El Paso, TX|Nashville, TN|Detroit, MI
Oklahoma City, OK|Portland, OR|Las Vegas, NV|Memphis, TN|Louisville, KY|Baltimore, MD|Milwaukee, WI
Albuquerque, NM|Tucson, AZ|Fresno, CA|Mesa, AZ|Sacramento, CA|Atlanta, GA|Kansas City, MO|Colorado Springs, CO
Omaha, NE|Raleigh, NC|Miami, FL|Long Beach, CA|Virginia Beach, VA|Oakland, CA|Minneapolis, MN|Tulsa, OK
Tampa, FL|Arlington, TX|New Orleans, LA|Wichita, KS|Cleveland, OH|Bakersfield, CA|Aurora, CO|Anaheim, CA
Honolulu, HI|Santa Ana, CA|Riverside, CA|Corpus Christi, TX|Lexington, KY|Stockton, CA|Henderson, NV
Saint Paul, MN|Cincinnati, OH|Pittsburgh, PA|Greensboro, NC|Anchorage, AK|Plano, TX|Lincoln, NE|Orlando, FL
Irvine, CA|Newark, NJ|Toledo, OH|Durham, NC|Chula Vista, CA|Fort Wayne, IN|Jersey City, NJ|Saint Petersburg, FL
Laredo, TX|Madison, WI|Chandler, AZ|Buffalo, NY|Lubbock, TX|Scottsdale, AZ|Reno, NV|Glendale, AZ|Gilbert, AZ
Winston Salem, NC|North Las Vegas, NV|Norfolk, VA|Chesapeake, VA|Garland, TX|Irving, TX|Hialeah, FL|Fremont, CA
Boise, ID|Richmond, VA|Baton Rouge, LA|Spokane, WA|Des Moines, IA|Tacoma, WA|San Bernardino, CA|Modesto, CA
Fontana, CA|Santa Clarita, CA|Birmingham, AL|Oxnard, CA|Fayetteville, NC|Moreno Valley, CA|Rochester, NY
Glendale, CA|Huntington Beach, CA|Salt Lake City, UT|Grand Rapids, MI|Amarillo, TX|Yonkers, NY|Aurora, IL
Montgomery, AL|Akron, OH|Little Rock, AR|Huntsville, AL|Augusta, GA|Columbus, GA|Grand Prairie, TX
Shreveport, LA|Overland Park, KS|Tallahassee, FL|Mobile, AL|Knoxville, TN|Worcester, MA|Providence, RI
Fort Lauderdale, FL|Chattanooga, TN|Tempe, AZ|Brownsville, TX|Cape Coral, FL|Sioux Falls, SD|Eugene, OR
Peoria, AZ|Santa Rosa, CA|Salem, OR|Elk Grove, CA|Ontario, CA|Pembroke Pines, FL|Springfield, MO
Rancho Cucamonga, CA|Vancouver, WA|Corona, CA|Lancaster, CA|Palmdale, CA|Hayward, CA|Salinas, CA
Alexandria, VA|Lakewood, CO|Springfield, MA|Sunnyvale, CA|Jackson, MS|Killeen, TX|Hollywood, FL|Murfreesboro, TN
Pasadena, TX|Bellevue, WA|Pomona, CA|Escondido, CA|Joliet, IL|Charleston, SC|Mesquite, TX|Naperville, IL
Rockford, IL|Bridgeport, CT|Syracuse, NY|Savannah, GA|Roseville, CA|Torrance, CA|Fullerton, CA|Surprise, AZ
McAllen, TX|Thornton, CO|Visalia, CA|Olathe, KS|Gainesville, FL|West Valley City, UT|Orange, CA|Denton, TX
Warren, MI|Pasadena, CA|Waco, TX|Cedar Rapids, IA|Dayton, OH|Elizabeth, NJ|Hampton, VA|Columbia, SC
Kent, WA|Stamford, CT|Lakewood, NJ|Victorville, CA|Miramar, FL|Coral Springs, FL|Sterling Heights, MI
New Haven, CT|Carrollton, TX|Midland, TX|Norman, OK|Santa Clara, CA|Athens, GA|Thousand Oaks, CA|Topeka, KS
Simi Valley, CA|Columbia, MO|Vallejo, CA|Fargo, ND|Allentown, PA|Pearland, TX|Concord, CA|Abilene, TX
Arvada, CO|Berkeley, CA|Ann Arbor, MI|Independence, MO|Rochester, MN|Lafayette, LA|Hartford, CT|College Station, TX
Clovis, CA|Fairfield, CA|Palm Bay, FL|Richardson, TX|Round Rock, TX|Cambridge, MA|Meridian, ID|West Palm Beach, FL
Evansville, IN|Westminster, CO|Billings, MT|Lowell, MA|Wilmington, NC|Provo, UT|Burlington, VT|Portland, ME
Manchester, NH|Cheyenne, WY|Charleston, WV|Wilmington, DE|Sioux City, IA|Duluth, MN|Flagstaff, AZ|Santa Fe, NM
""".replace("\n", "|").split("|") if line.strip())

STATES = ("Alabama Alaska Arizona Arkansas California Colorado Connecticut Delaware Florida Georgia Hawaii Idaho "
          "Illinois Indiana Iowa Kansas Kentucky Louisiana Maine Maryland Massachusetts Michigan Minnesota "
          "Mississippi Missouri Montana Nebraska Nevada Ohio Oklahoma Oregon Pennsylvania Tennessee Texas Utah "
          "Vermont Virginia Washington Wisconsin Wyoming").split()

_REAL_UNIVERSITIES = (
    "Harvard University", "Stanford University", "Yale University", "Princeton University", "Columbia University",
    "Cornell University", "Brown University", "Dartmouth College", "Duke University", "Rice University",
    "Vanderbilt University", "Emory University", "Georgetown University", "Tufts University", "Boston University",
    "Boston College", "Northeastern University", "Northwestern University", "Purdue University",
    "Carnegie Mellon University", "Johns Hopkins University", "New York University", "Syracuse University",
    "Tulane University", "Baylor University", "Clemson University", "Auburn University", "Rutgers University",
    "Temple University", "Drexel University", "Villanova University", "Fordham University", "Howard University",
    "Brandeis University", "Wake Forest University", "Lehigh University", "Yeshiva University",
    "Pepperdine University", "Gonzaga University", "Creighton University", "Marquette University",
    "Loyola University Chicago", "Stevens Institute of Technology", "Rensselaer Polytechnic Institute",
    "Massachusetts Institute of Technology", "California Institute of Technology", "Georgia Institute of Technology",
    "Williams College", "Amherst College", "Swarthmore College", "Wellesley College", "Bowdoin College",
    "Middlebury College", "Pomona College", "Carleton College", "Oberlin College", "Vassar College",
    "Colgate University", "Bucknell University", "Wesleyan University", "Case Western Reserve University",
    "University of Chicago", "University of Rochester", "University of Notre Dame", "University of Miami",
    "University of Southern California", "University of San Francisco", "University of Denver",
    "University of Tulsa", "University of Dayton",
)
UNIVERSITIES = _REAL_UNIVERSITIES + tuple(f"University of {s}" for s in STATES) + tuple(
    f"{s} State University" for s in STATES)

MAJORS = (
    "Computer Science", "Mathematics", "Physics", "Chemistry", "Biology", "Economics", "Psychology", "History",
    "Philosophy", "Law", "Medicine", "Nursing", "Accounting", "Finance", "Marketing", "Business Administration",
    "Mechanical Engineering", "Electrical Engineering", "Civil Engineering", "Chemical Engineering", "Architecture",
    "Political Science", "Sociology", "Anthropology", "English Literature", "Music", "Fine Arts", "Journalism",
    "Statistics", "Geology", "Linguistics", "Education",
)

COMPANIES = (
    "Northwind Traders", "Contoso Group", "Initech", "Globex Corporation", "Umbrella Holdings", "Stark Industries",
    "Wayne Enterprises", "Cyberdyne Systems", "Soylent Foods", "Tyrell Corporation", "Vandelay Industries",
    "Wonka Industries", "Acme Corporation", "Hooli", "Massive Dynamic", "Aperture Laboratories", "Oscorp",
    "Monarch Solutions", "Dunder Mifflin", "Pied Piper",
)
COMPANY_HEADS = ("Apex", "Summit", "Pioneer", "Atlas", "Beacon", "Cascade", "Frontier", "Harbor", "Keystone",
                 "Liberty", "Meridian", "Nexus", "Orion", "Pinnacle", "Quantum", "Redwood", "Sterling", "Titan",
                 "Unity", "Vertex", "Evergreen", "Granite", "Horizon", "Ironwood", "Juniper", "Lakeshore",
                 "Magnolia", "Northstar", "Oakridge", "Paragon", "Silverline", "Trident", "Crescent", "Bluewater",
                 "Cobalt", "Falcon", "Heritage", "Lighthouse", "Riverbend", "Westfield")
COMPANY_TAILS = ("Systems", "Holdings", "Industries", "Dynamics", "Technologies", "Logistics", "Energy", "Foods",
                 "Financial", "Pharmaceuticals", "Networks", "Motors", "Insurance", "Partners", "Materials")
